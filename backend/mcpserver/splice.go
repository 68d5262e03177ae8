package mcpserver

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Screenshots go out without passing through the SDK's JSON encoding.
//
// A tool result's screenshot is already base64 (the tools make it so for the models). Handed
// to the SDK as an mcp.ImageContent it is decoded here, encoded again by the SDK and then
// copied and validated byte by byte three times over (encoding/json compacts the output of
// every MarshalJSON on the way: the content, the CallToolResult, the JSON-RPC response) before
// the SSE event is written: about 10 ms of CPU for a 250 KB screenshot on a busy 2-core
// machine (BenchmarkClickCall, client included: ~28 CPU ms a call through the SDK, ~13
// spliced), on top of the step itself.
//
// Instead the result carries a spliced image: its JSON is a placeholder (a one-off random
// ref in the data field) that the SDK encodes cheaply, and the handler's ResponseWriter
// (spliceWriter) writes the image's base64 in its place when the event goes out. A ref is
// bound to the MCP session whose call made it and is used once; the SDK writes every event
// with one Write call (writeEvent), so a ref is never cut in two. The image's JSON is the
// same either way: {"type":"image","mimeType":…,"data":"<base64>"}.

// refPrefix starts every placeholder; refLen is a placeholder's length.
const (
	refPrefix = "cubicle-spliced-image-"
	refLen    = len(refPrefix) + 32
	// refTTL drops images whose response was never written (the client went away).
	refTTL = 10 * time.Minute
)

type splicedData struct {
	session string
	data    string // base64
	added   time.Time
}

// splices holds the images waiting for their response to be written.
type splices struct {
	mu   sync.Mutex
	refs map[string]splicedData
}

// add keeps data (base64) for session's response and returns its placeholder.
func (s *splices) add(session, data string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	ref := refPrefix + hex.EncodeToString(b[:])
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refs == nil {
		s.refs = map[string]splicedData{}
	}
	for k, v := range s.refs {
		if now.Sub(v.added) > refTTL {
			delete(s.refs, k)
		}
	}
	s.refs[ref] = splicedData{session: session, data: data, added: now}
	return ref
}

// take removes and returns ref's image if it belongs to session.
func (s *splices) take(session, ref string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.refs[ref]
	if !ok || d.session != session {
		return "", false
	}
	delete(s.refs, ref)
	return d.data, true
}

func (s *splices) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.refs) > 0
}

// splicedImage is an image content whose data is written by spliceWriter.
type splicedImage struct {
	*mcp.ImageContent // its MIME type; makes the type an mcp.Content
	ref               string
}

func (c *splicedImage) MarshalJSON() ([]byte, error) {
	return []byte(`{"type":"image","mimeType":` + strconv.Quote(c.MIMEType) + `,"data":"` + c.ref + `"}`), nil
}

// splice wraps the SDK's handler: its responses get their images in place of the refs.
func (s *splices) splice(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		session := r.Header.Get("Mcp-Session-Id")
		if session == "" {
			h.ServeHTTP(w, r) // no session: no refs of its own
			return
		}
		h.ServeHTTP(&spliceWriter{ResponseWriter: w, s: s, session: session}, r)
	})
}

type spliceWriter struct {
	http.ResponseWriter
	s       *splices
	session string
}

// Unwrap lets http.ResponseController reach the connection (the SDK flushes every event).
func (w *spliceWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *spliceWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *spliceWriter) Write(p []byte) (int, error) {
	if !w.s.pending() {
		return w.ResponseWriter.Write(p)
	}
	rest := p
	for {
		i := bytes.Index(rest, []byte(refPrefix))
		if i < 0 || len(rest)-i < refLen {
			break
		}
		data, ok := w.s.take(w.session, string(rest[i:i+refLen]))
		if !ok {
			// Not ours (or text that looks like one): written as it is.
			if _, err := w.ResponseWriter.Write(rest[:i+len(refPrefix)]); err != nil {
				return 0, err
			}
			rest = rest[i+len(refPrefix):]
			continue
		}
		if _, err := w.ResponseWriter.Write(rest[:i]); err != nil {
			return 0, err
		}
		if _, err := io.WriteString(w.ResponseWriter, data); err != nil {
			return 0, err
		}
		rest = rest[i+refLen:]
	}
	if _, err := w.ResponseWriter.Write(rest); err != nil {
		return 0, err
	}
	return len(p), nil
}
