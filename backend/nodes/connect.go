package nodes

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/store"
	"cubicle/runner/wire"
)

// Authenticate checks the runner token in r's "Authorization: Bearer" header and returns its
// runner: fault.ErrUnauthenticated for a missing or unknown token, fault.ErrForbidden for a
// revoked runner.
func (h *Hub) Authenticate(r *http.Request) (store.Runner, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	id, secret, ok2 := strings.Cut(strings.TrimSpace(tok), ".")
	if !ok || !ok2 || id == "" || secret == "" {
		return store.Runner{}, fault.New(fault.ErrUnauthenticated, "send the runner's token as Authorization: Bearer <token>")
	}
	rec, err := h.cfg.Store.Runner(id)
	sum := sha256.Sum256([]byte(secret))
	if err != nil || subtle.ConstantTimeCompare(sum[:], rec.TokenHash) != 1 {
		return store.Runner{}, fault.New(fault.ErrUnauthenticated, "unknown runner token: add the runner in Settings → Runners and use the command shown there")
	}
	if rec.Revoked {
		return store.Runner{}, fault.Forbidden("runner %s (%s) was revoked: add it again in Settings → Runners", rec.Name, rec.ID)
	}
	return rec, nil
}

// ServeHTTP is GET /api/runner/connect: it authenticates the runner by its bearer token,
// upgrades to a websocket, reads its Hello, answers Welcome and runs the session.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	refuse := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": map[int]string{401: "unauthenticated", 403: "forbidden", 400: "invalid", 409: "conflict"}[code]})
	}
	if r.Header.Get("Origin") != "" {
		refuse(http.StatusForbidden, "runner connections do not come from web pages")
		return
	}
	rec, err := h.Authenticate(r)
	if err != nil {
		code := http.StatusUnauthorized
		if errors.Is(err, fault.ErrForbidden) {
			code = http.StatusForbidden
		}
		refuse(code, err.Error())
		return
	}
	id := rec.ID
	if old := h.conn(id); old != nil && id != LocalID && old.alive() {
		// Two processes on one token would take turns, each dropping the other's link: the
		// one already connected keeps it, this one is refused and the administrators told.
		h.duplicate(id, r.RemoteAddr)
		refuse(http.StatusConflict, fmt.Sprintf("runner %s (%s) is already connected from %s since %s: a second runner process with the same token is refused. "+
			"Stop the other process, or add this machine as a runner of its own in Settings → Runners",
			rec.Name, id, old.remote, old.since.UTC().Format(time.RFC3339)))
		return
	}
	ws, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	var hello wire.Hello
	if err := ws.ReadJSON(&hello); err != nil {
		ws.Close()
		return
	}
	if hello.Protocol != wire.Protocol {
		msg := fmt.Sprintf("runner %s speaks link protocol %d; this server (version %s) speaks %d: update the runner to version %s",
			rec.Name, hello.Protocol, h.cfg.Version, wire.Protocol, h.cfg.Version)
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, msg), time.Now().Add(time.Second))
		ws.Close()
		h.log.Warn("runner refused", "node", id, "reason", msg)
		return
	}
	ws.SetReadDeadline(time.Time{})
	raw, _ := json.Marshal(hello)
	if _, err := h.cfg.Store.UpdateRunner(id, func(r *store.Runner) error {
		r.Hello, r.LastSeen = raw, time.Now().UTC()
		return nil
	}); err != nil {
		ws.Close()
		return
	}
	ws.SetWriteDeadline(time.Now().Add(wire.WriteTimeout))
	welcome := wire.Welcome{NodeID: id, Name: rec.Name, Cloud: rec.Cloud}
	if p := h.plan(rec, hello); p.available {
		welcome.Update = &wire.Update{Version: p.bin.Version, SHA256: p.bin.SHA256, Size: p.bin.Size}
	}
	if err := ws.WriteJSON(welcome); err != nil {
		ws.Close()
		return
	}
	ws.SetWriteDeadline(time.Time{})
	sess, err := yamux.Client(wire.NewConn(ws), wire.SessionConfig())
	if err != nil {
		ws.Close()
		return
	}
	c := &conn{node: id, name: rec.Name, hello: hello, sess: sess, since: time.Now(), remote: r.RemoteAddr, guests: map[string]*guest.Client{}, seen: map[string]bool{}, sent: map[string]int{}}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		sess.Close()
		return
	}
	old := h.conns[id]
	h.conns[id] = c
	h.wg.Add(1)
	follow := id != LocalID // the managed local runner's changes reach the bus from its manager directly
	if follow {
		h.wg.Add(1)
	}
	h.mu.Unlock()
	if old != nil {
		old.sess.Close() // a runner that came back before its old link was noticed dead
	}
	h.log.Info("runner connected", "node", id, "name", rec.Name, "version", hello.Version, "os", hello.OS, "arch", hello.Arch,
		"engine", hello.Engine, "remote", r.RemoteAddr)
	go h.watch(c)
	if follow {
		go h.follow(c)
	}
	if h.cfg.OnConnect != nil {
		h.cfg.OnConnect(id)
	}
}

// alive reports whether c's link still answers a ping (within 3 s): a runner that comes back
// before its old link was noticed dead replaces it; a second live process does not.
func (c *conn) alive() bool {
	done := make(chan error, 1)
	go func() { // ends when the ping is answered, times out (yamux's write timeout) or the session closes
		_, err := c.sess.Ping()
		done <- err
	}()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(3 * time.Second):
		return false
	}
}

// duplicate records and announces a refused second connection on node's token.
func (h *Hub) duplicate(node, from string) {
	h.mu.Lock()
	h.dups[node] = events.RunnerDuplicate{From: from, At: time.Now().UTC()}
	h.mu.Unlock()
	h.log.Warn("a second runner process with the same token was refused", "node", node, "from", from)
	h.runnerEvent(node, events.RunnerConnected)
}

// watch waits for c's session to end, then fails its relayed links, forgets it and tells
// OnDisconnect.
func (h *Hub) watch(c *conn) {
	defer h.wg.Done()
	<-c.sess.CloseChan()
	c.mu.Lock()
	gs := c.guests
	c.guests = map[string]*guest.Client{}
	c.mu.Unlock()
	for _, g := range gs {
		g.Close()
	}
	h.mu.Lock()
	current := h.conns[c.node] == c
	if current {
		delete(h.conns, c.node)
	}
	h.mu.Unlock()
	h.cfg.Store.UpdateRunner(c.node, func(r *store.Runner) error {
		r.LastSeen = time.Now().UTC()
		return nil
	})
	if current {
		h.log.Warn("runner disconnected: its desktops are unreachable until it reconnects", "node", c.node, "name", c.name)
		if h.cfg.OnDisconnect != nil {
			h.cfg.OnDisconnect(c.node, h.seen(c))
		}
		if c.node != LocalID {
			h.unreachable(c.node)
		}
	}
}
