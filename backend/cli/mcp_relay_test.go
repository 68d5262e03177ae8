package cli

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// stdioRelay puts a stdio MCP server (a `cubicle mcp` process) behind streamable HTTP so that
// tools that speak only HTTP, the conformance suite, can drive it. It is transport and nothing
// else: every initialize without a session starts one process, the session's id names it,
// each JSON-RPC message of a POST goes to that process's stdin as one line, a request is
// answered with the process's response for its id (application/json), a notification or a
// response with 202; what the process writes that is not a response (its notifications and
// requests) goes to the session's GET event stream. It never answers a JSON-RPC message
// itself: when the process is gone, the HTTP answer is a 502 with the process's stderr.
//
// Goroutines: one stdout reader per process, owned by the relay; Close ends every process
// (stdin closed: the bridge's end of session) and waits for them.
type stdioRelay struct {
	start func() *exec.Cmd // a new, unstarted bridge process
	logf  func(string, ...any)

	wg       sync.WaitGroup
	mu       sync.Mutex
	sessions map[string]*relaySession // guarded by mu
	ended    []*relaySession          // sessions ended by DELETE; guarded by mu
	started  int                      // processes started; guarded by mu
	notJSON  atomic.Int64             // lines of the processes' stdout that were not JSON-RPC
	closed   bool                     // guarded by mu
}

func newStdioRelay(start func() *exec.Cmd, logf func(string, ...any)) *stdioRelay {
	return &stdioRelay{start: start, logf: logf, sessions: map[string]*relaySession{}}
}

// relaySession is one MCP session: one bridge process.
type relaySession struct {
	id     string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{} // closed when the process's stdout ended
	exit   error         // the process's exit; set before exited is closed
	exited chan struct{}

	writeMu sync.Mutex // one line at a time on stdin
	stdin   io.WriteCloser

	mu      sync.Mutex
	waiting map[string]chan json.RawMessage // request id → its response; guarded by mu
	stream  chan json.RawMessage            // the GET stream's messages, nil without one; guarded by mu
}

// message is what the relay reads of a JSON-RPC message to route it.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

func (m message) isRequest() bool  { return m.Method != "" && hasID(m.ID) }
func (m message) isResponse() bool { return m.Method == "" && hasID(m.ID) }

func hasID(id json.RawMessage) bool { return len(id) > 0 && string(id) != "null" }

// key is a request id as the map keys it (the JSON text, compacted).
func key(id json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

func (r *stdioRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodPost:
		r.post(w, req)
	case http.MethodGet:
		r.get(w, req)
	case http.MethodDelete:
		s := r.session(w, req)
		if s == nil {
			return
		}
		r.mu.Lock()
		delete(r.sessions, s.id)
		r.ended = append(r.ended, s)
		r.mu.Unlock()
		s.end()
		w.WriteHeader(http.StatusOK)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// session is the request's session, or nil after answering 400 (no id) or 404 (unknown id).
func (r *stdioRelay) session(w http.ResponseWriter, req *http.Request) *relaySession {
	id := req.Header.Get("Mcp-Session-Id")
	if id == "" {
		http.Error(w, "Bad Request: Mcp-Session-Id header is required", http.StatusBadRequest)
		return nil
	}
	r.mu.Lock()
	s := r.sessions[id]
	r.mu.Unlock()
	if s == nil {
		http.Error(w, "session not found", http.StatusNotFound)
	}
	return s
}

func (r *stdioRelay) post(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 50<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		// a batch, or not JSON: nothing a stdio session could be given as one message
		http.Error(w, "Bad Request: the body is not one JSON-RPC message: "+err.Error(), http.StatusBadRequest)
		return
	}
	var s *relaySession
	if req.Header.Get("Mcp-Session-Id") == "" && m.Method == "initialize" {
		if s, err = r.open(); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Mcp-Session-Id", s.id)
	} else if s = r.session(w, req); s == nil {
		return
	}
	if !m.isRequest() {
		if err := s.send(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	ch := make(chan json.RawMessage, 1)
	k := key(m.ID)
	s.mu.Lock()
	s.waiting[k] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, k)
		s.mu.Unlock()
	}()
	if err := s.send(body); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	select {
	case res := <-ch:
		w.Header().Set("Content-Type", "application/json")
		w.Write(res)
	case <-s.done:
		http.Error(w, fmt.Sprintf("the bridge process ended before it answered: %s", s.stderr), http.StatusBadGateway)
	case <-req.Context().Done():
	}
}

func (r *stdioRelay) get(w http.ResponseWriter, req *http.Request) {
	s := r.session(w, req)
	if s == nil {
		return
	}
	ch := make(chan json.RawMessage, 64)
	s.mu.Lock()
	if s.stream != nil {
		s.mu.Unlock()
		http.Error(w, "Conflict: this session already has its event stream", http.StatusConflict)
		return
	}
	s.stream = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stream = nil
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	for {
		select {
		case m := <-ch:
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", m)
			if fl != nil {
				fl.Flush()
			}
		case <-s.done:
			return
		case <-req.Context().Done():
			return
		}
	}
}

// open starts a session's process.
func (r *stdioRelay) open() (*relaySession, error) {
	var raw [16]byte
	rand.Read(raw[:])
	s := &relaySession{id: hex.EncodeToString(raw[:]), cmd: r.start(), stderr: &syncBuffer{},
		done: make(chan struct{}), exited: make(chan struct{}), waiting: map[string]chan json.RawMessage{}}
	s.cmd.Stderr = s.stderr
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.stdin = stdin
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("the relay is closed")
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the bridge: %w", err)
	}
	r.started++
	r.sessions[s.id] = s
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		s.read(stdout, r.logf, &r.notJSON)
		s.exit = s.cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// read routes the process's stdout until it ends: responses to their requests, the rest to
// the event stream.
func (s *relaySession) read(stdout io.Reader, logf func(string, ...any), notJSON *atomic.Int64) {
	defer close(s.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := bytes.Clone(sc.Bytes())
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			notJSON.Add(1)
			logf("relay: session %s: the bridge wrote a line that is not JSON-RPC: %q", s.id, line)
			continue
		}
		s.mu.Lock()
		var to chan json.RawMessage
		if m.isResponse() {
			to = s.waiting[key(m.ID)]
		} else {
			to = s.stream
		}
		s.mu.Unlock()
		if to == nil {
			logf("relay: session %s: nobody to hand this to (no request waiting, no event stream): %s", s.id, line)
			continue
		}
		select {
		case to <- line:
		default:
			logf("relay: session %s: the event stream is full, dropped: %s", s.id, line)
		}
	}
}

// send writes one message as a line on the process's stdin.
func (s *relaySession) send(msg []byte) error {
	var b bytes.Buffer
	if err := json.Compact(&b, msg); err != nil {
		return err
	}
	b.WriteByte('\n')
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if _, err := s.stdin.Write(b.Bytes()); err != nil {
		return fmt.Errorf("the bridge process does not take input (%v): %s", err, s.stderr)
	}
	return nil
}

// end closes the process's stdin, which ends a stdio MCP session, and waits for the process
// (killing it after a minute, which the process's exit error then shows).
func (s *relaySession) end() {
	s.writeMu.Lock()
	s.stdin.Close()
	s.writeMu.Unlock()
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// Close ends every session's process and waits for them; it returns, per process, how it
// exited (nil: it ended by itself with status 0) and its stderr.
func (r *stdioRelay) Close() map[string]string {
	r.mu.Lock()
	r.closed = true
	all := append([]*relaySession{}, r.ended...)
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	for _, s := range all {
		s.end()
	}
	r.wg.Wait()
	bad := map[string]string{}
	for _, s := range all {
		if s.exit != nil {
			bad[s.id] = fmt.Sprintf("%v: %s", s.exit, s.stderr)
		}
	}
	return bad
}

// NotJSON is how many lines the processes wrote on stdout that were not JSON-RPC messages.
func (r *stdioRelay) NotJSON() int64 { return r.notJSON.Load() }

// Started is how many bridge processes the relay started.
func (r *stdioRelay) Started() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}
