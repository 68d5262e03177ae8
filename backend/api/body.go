package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxBody is the largest request body the API reads (1 MiB); a larger one answers 413.
const maxBody = 1 << 20

// maxExternalBody is the largest body of POST /api/app/chat/external, which carries a file
// the person picked (agent.MaxExternalFile, in base64).
const maxExternalBody = 12 << 20

// BodyLimit is the largest request body the API reads for path (413 above it).
func BodyLimit(path string) int64 {
	if path == externalPath {
		return maxExternalBody
	}
	return maxBody
}

// jsonBodies checks the body of every state-changing request before any route sees it: at
// most maxBody bytes (413 otherwise: see refuseLarge), one well-formed JSON object
// with no trailing data and no key given twice in one object (400 otherwise). So a route that
// ignores its body (logout, an action) cannot be reached with garbage, and no two parsers can
// read one body two ways ({"role":"member","role":"admin"}). The guard has already refused
// bodies that are not declared as JSON. Bodiless requests pass as they are (a websocket
// handshake is a bodiless GET; "Upgrade: websocket" on a POST changes nothing here).
func jsonBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.URL.Path == "/mcp" ||
			(uploadPath(r) && isOctets(r.Header.Get("Content-Type"))) {
			// An upload chunk (files.go) is raw bytes the route reads with its own bound.
			// /mcp reads its own JSON-RPC bodies, with its own bound (computer_write_file
			// carries files of up to 25 MiB).
			next.ServeHTTP(w, r)
			return
		}
		limit := BodyLimit(r.URL.Path)
		if r.ContentLength > limit {
			refuseLarge(w, r, r.ContentLength)
			return
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{Error: "the request body could not be read to its end; send it again", Code: "invalid"})
			return
		}
		if int64(len(raw)) > limit {
			refuseLarge(w, r, -1)
			return
		}
		if len(bytes.TrimSpace(raw)) > 0 {
			if err := checkJSON(raw); err != nil {
				writeJSON(w, http.StatusBadRequest, errorBody{
					Error: "the request body is not valid JSON for this call: " + err.Error() + "; send one JSON object with Content-Type: application/json",
					Code:  "invalid"})
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		r.ContentLength = int64(len(raw))
		next.ServeHTTP(w, r)
	})
}

// drainLimit bounds what refuseLarge reads of a body it refuses.
const drainLimit = 32 << 20

// refuseLarge answers 413 to a body over maxBody (n bytes declared, or -1: sent without a
// length). It first reads and drops what the client is still sending, up to drainLimit, so
// that a plain client (one that does not wait for 100 Continue) reads the answer instead of a
// reset connection; a larger body, or one the client holds back until 100 Continue (curl),
// gets the answer at once and the connection is closed.
func refuseLarge(w http.ResponseWriter, r *http.Request, n int64) {
	waits := strings.EqualFold(r.Header.Get("Expect"), "100-continue") // has sent nothing yet
	if n > drainLimit || (n > 0 && waits) {
		w.Header().Set("Connection", "close")
	} else if _, err := io.CopyN(io.Discard, r.Body, drainLimit); err == nil {
		w.Header().Set("Connection", "close") // more than drainLimit: give up on the rest
	}
	size := "more than 1 MiB"
	if n > 0 {
		size = fmt.Sprintf("%d bytes", n)
	}
	writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{
		Error: "the request body is too large (" + size + "); the API reads at most 1 MiB", Code: "too_large"})
}

// checkJSON reports why raw is not exactly one JSON object whose objects name each key once.
// Every body of the API is an object, so an array, a string or null is refused here too (a
// route that reads no body would otherwise act on one).
func checkJSON(raw []byte) error {
	if !json.Valid(raw) {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		return errors.New("malformed JSON")
	}
	if raw = bytes.TrimSpace(raw); raw[0] != '{' {
		return errors.New("the body must be a JSON object ({…})")
	}
	return duplicateKey(raw)
}

// duplicateKey walks raw (valid JSON) and reports the first object key given twice.
func duplicateKey(raw []byte) error {
	type frame struct {
		keys    map[string]bool // nil for an array
		wantKey bool            // the next string in this object is a key
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.keys != nil {
			if top.wantKey {
				k, _ := tok.(string)
				if top.keys[k] {
					return fmt.Errorf("the key %s appears twice in one object", quote(k))
				}
				top.keys[k] = true
				top.wantKey = false
				continue
			}
			top.wantKey = true // this token is the key's value (or opens it)
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' {
				stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
			} else {
				stack = append(stack, &frame{})
			}
		}
	}
}
