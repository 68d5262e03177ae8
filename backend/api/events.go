package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"cubicle/backend/auth"
	"cubicle/backend/events"
	"cubicle/backend/fault"
)

// This file serves GET /api/app/events: the UI's one event stream (docs/events.md). The
// browser and the Wails window read it with fetch (so the desktop window's bearer token works
// the same as the browser's cookie); the UI updates from it instead of polling.

// Events is the event bus the stream reads; *events.Bus satisfies it.
type Events interface {
	Subscribe(o events.SubscribeOptions) *events.Subscription
	Epoch() string
	LastID() uint64
}

var _ Events = (*events.Bus)(nil)

// Stream message types that are not bus events.
const (
	streamHello  = "stream.hello"  // first message: the stream's epoch and newest id
	streamResync = "stream.resync" // events were lost: read the state afresh
)

// eventsHeartbeat is how often an idle stream sends a comment, so that a dead connection is
// noticed and proxies do not close it.
const eventsHeartbeat = 25 * time.Second

// openStream counts an event stream of account, or reports false when the account already
// holds Config.MaxStreams (each holds a subscription and its buffer on the server).
func (s *Server) openStream(account string) bool {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streams[account] >= s.cfg.MaxStreams {
		return false
	}
	s.streams[account]++
	return true
}

// closeStream: see openStream.
func (s *Server) closeStream(account string) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streams[account]--; s.streams[account] <= 0 {
		delete(s.streams, account)
	}
}

// eventJSON is one bus event on the stream.
type eventJSON struct {
	ID   string      `json:"id"` // "<epoch>-<n>": the Last-Event-ID to resume from
	Type events.Type `json:"type"`
	Time time.Time   `json:"time"`
	Data any         `json:"data"`
}

// streamEvents serves the stream: events the caller may see (a member: about their own agents
// and desktops; an administrator: also every desktop, preparation progress, resources and
// runners), from the Last-Event-ID on when the header names an id of this server's epoch.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	bus := s.cfg.Events
	if bus == nil {
		writeError(w, r, s.log, fault.Unavailable("the event stream is not available on this server; the UI falls back to polling"))
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, r, s.log, fault.Unavailable("this connection cannot stream events"))
		return
	}
	p := principal(r)
	if !s.openStream(p.AccountID) {
		w.Header().Set("Retry-After", "30")
		writeError(w, r, s.log, fault.New(fault.ErrTooMany,
			"this account already has %d event streams open, the most one account may hold: close Cubicle in other tabs or windows, then reload", s.cfg.MaxStreams))
		return
	}
	defer s.closeStream(p.AccountID)
	viewer := events.Viewer{Account: p.AccountID, Admin: p.Admin()}
	since, resync := resumeFrom(r.Header.Get("Last-Event-ID"), bus.Epoch())
	sub := bus.Subscribe(events.SubscribeOptions{Viewer: &viewer, Since: since, Buffer: 512})
	defer sub.Close()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(id string, v any) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if id != "" {
			if _, err := fmt.Fprintf(w, "id: %s\n", id); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", raw); err != nil {
			return err
		}
		fl.Flush()
		return nil
	}
	hello := map[string]any{"type": streamHello, "epoch": bus.Epoch(), "lastId": bus.LastID(), "admin": viewer.Admin,
		"heartbeatSeconds": eventsHeartbeat.Seconds()}
	if write("", hello) != nil {
		return
	}
	if resync || sub.Lagged() {
		if write("", map[string]any{"type": streamResync, "reason": "events were missed while disconnected"}) != nil {
			return
		}
	}
	beat := time.NewTicker(eventsHeartbeat)
	defer beat.Stop()
	recheck := time.NewTicker(sessionRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-recheck.C:
			if !s.stillValid(p) {
				return
			}
		case e, ok := <-sub.C():
			if !ok {
				return // the bus closed: the server is shutting down
			}
			if !s.stillValid(p) {
				return
			}
			id := bus.Epoch() + "-" + strconv.FormatUint(e.ID, 10)
			if write(id, eventJSON{ID: id, Type: e.Type, Time: e.Time, Data: e.Data}) != nil {
				return
			}
			if sub.Lagged() {
				if write("", map[string]any{"type": streamResync, "reason": "this stream fell behind"}) != nil {
					return
				}
			}
		}
	}
}

// sessionRecheck is how often an open stream checks that its session still stands (it is
// checked before every event too).
var sessionRecheck = time.Second

// stillValid reports whether the session p opened a stream with still stands with the same
// role: a logout, a password change, a disabled or deleted account, or a change of role ends
// the stream (the client reconnects and sees what its session now may, or logs in again).
func (s *Server) stillValid(p auth.Principal) bool {
	now, err := s.cfg.Auth.Authenticate(p.Token)
	if err != nil {
		s.log.Info("event stream ended: the session does not stand any more", "user", p.Username, "err", err)
		return false
	}
	if now.AccountID != p.AccountID || now.Admin() != p.Admin() {
		s.log.Info("event stream ended: the account's role changed", "user", p.Username)
		return false
	}
	return true
}

// resumeFrom reads a Last-Event-ID: the id to replay after when it is of this epoch, else 0
// and resync when the client had seen events of another process (or sent nonsense).
func resumeFrom(last, epoch string) (since uint64, resync bool) {
	if last == "" {
		return 0, false
	}
	ep, n, ok := strings.Cut(last, "-")
	if !ok || ep != epoch {
		return 0, true
	}
	v, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return 0, true
	}
	return v, false
}
