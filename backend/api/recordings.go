package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/auth"
	"cubicle/backend/computerwire"
	"cubicle/backend/fault"
	"cubicle/backend/liveview"
	"cubicle/backend/recording"
)

// Recordings of agents' desktops (issue 24, docs/recording.md): listing, metadata, the
// agent's screenshots at markers, deletion, the replay stream (the computer channel's version
// 2 messages, so the live view's decoder draws it) and the administrator's settings.

// Recordings are the recordings of every node: the server's own (recording.Service) and
// those of the runners that record their own desktops, read over their links
// (backend/recordings.go). A recording whose runner is offline is fault.ErrUnavailable,
// saying so. Delete, Screenshot and Play take the recording as Get or Lookup returned it (it
// says where it is kept).
type Recordings interface {
	// List is accountID's recordings listed under agentID, newest first.
	List(ctx context.Context, accountID, agentID string) ([]recording.Info, error)
	Get(ctx context.Context, accountID, agentID, id string) (recording.Info, error)
	// Lookup finds a recording listed under agentID whatever its account (administrators
	// delete any).
	Lookup(ctx context.Context, agentID, id string) (recording.Info, error)
	Delete(ctx context.Context, i recording.Info) error
	Screenshot(ctx context.Context, i recording.Info, marker int) (data []byte, mediaType string, err error)
	Play(ctx context.Context, i recording.Info, from time.Duration, speed float64, ctrl <-chan recording.Control, out recording.Sink) error
	Settings() recording.Settings
	SetSettings(st recording.Settings) (recording.Settings, error)
	Usage() (count int, bytes int64)
}

func (s *Server) recordingRoutes(mux *router) {
	mux.Handle("GET /api/app/agents/{id}/recordings", s.authed(s.needRecordings(s.listRecordings)))
	mux.Handle("GET /api/app/agents/{id}/recordings/{rid}", s.authed(s.needRecordings(s.getRecording)))
	mux.Handle("DELETE /api/app/agents/{id}/recordings/{rid}", s.authed(s.needRecordings(s.deleteRecording)))
	mux.Handle("GET /api/app/agents/{id}/recordings/{rid}/markers/{n}/screenshot", s.authed(s.needRecordings(s.recordingShot)))
	// The replay checks the login itself: it also accepts ?access_token= on upgrades.
	mux.Handle("GET /api/app/agents/{id}/recordings/{rid}/replay", s.needRecordings(s.replayRecording))
	mux.Handle("GET /api/app/admin/recordings", s.admin(s.needRecordings(s.getRecordingSettings)))
	mux.Handle("PUT /api/app/admin/recordings", s.admin(s.needRecordings(s.putRecordingSettings)))
}

func (s *Server) needRecordings(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Recordings == nil {
			writeError(w, r, s.log, fault.Unavailable("desktop recordings are not available on this server"))
			return
		}
		h(w, r)
	}
}

// ownRecording returns recording rid of the caller's agent id: another account's agent or
// recording is not found.
func (s *Server) ownRecording(ctx context.Context, p auth.Principal, agentID, rid string) (recording.Info, error) {
	if _, err := s.cfg.Profiles.Get(p.AccountID, agentID); err != nil {
		return recording.Info{}, err
	}
	return s.cfg.Recordings.Get(ctx, p.AccountID, agentID, rid)
}

func (s *Server) listRecordings(w http.ResponseWriter, r *http.Request) {
	p, id := principal(r), r.PathValue("id")
	if _, err := s.cfg.Profiles.Get(p.AccountID, id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	list, err := s.cfg.Recordings.List(r.Context(), p.AccountID, id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) getRecording(w http.ResponseWriter, r *http.Request) {
	i, err := s.ownRecording(r.Context(), principal(r), r.PathValue("id"), r.PathValue("rid"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, i)
}

// deleteRecording removes a recording: its owner's, or any for an administrator.
func (s *Server) deleteRecording(w http.ResponseWriter, r *http.Request) {
	p, agentID, rid := principal(r), r.PathValue("id"), r.PathValue("rid")
	i, err := s.ownRecording(r.Context(), p, agentID, rid)
	if err != nil && p.Admin() && errors.Is(err, fault.ErrNotFound) {
		if i, err = s.cfg.Recordings.Lookup(r.Context(), agentID, rid); err == nil && !contains(i.AgentIDs, agentID) {
			err = fault.NotFound("recording %q not found", rid)
		}
	}
	if err == nil {
		err = s.cfg.Recordings.Delete(r.Context(), i)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func (s *Server) recordingShot(w http.ResponseWriter, r *http.Request) {
	i, err := s.ownRecording(r.Context(), principal(r), r.PathValue("id"), r.PathValue("rid"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil {
		writeError(w, r, s.log, fault.Invalid("the marker is its index in the recording's markers (0, 1, …)"))
		return
	}
	raw, typ, err := s.cfg.Recordings.Screenshot(r.Context(), i, n)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	w.Header().Set("Content-Type", typ)
	w.Header().Set("Cache-Control", "private, max-age=86400")
	w.Write(raw)
}

// recordingSettingsJSON is the administrator's view: the settings and what is kept.
type recordingSettingsJSON struct {
	recording.Settings
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
}

func (s *Server) getRecordingSettings(w http.ResponseWriter, r *http.Request) {
	n, b := s.cfg.Recordings.Usage()
	writeJSON(w, http.StatusOK, recordingSettingsJSON{Settings: s.cfg.Recordings.Settings(), Count: n, Bytes: b})
}

func (s *Server) putRecordingSettings(w http.ResponseWriter, r *http.Request) {
	// Only the fields sent change.
	var body struct {
		NeverRecord *[]string `json:"neverRecord"`
		KeepDays    *int      `json:"keepDays"`
		MaxBytes    *int64    `json:"maxBytes"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	st := s.cfg.Recordings.Settings()
	if body.NeverRecord != nil {
		st.NeverRecord = *body.NeverRecord
	}
	if body.KeepDays != nil {
		st.KeepDays = *body.KeepDays
	}
	if body.MaxBytes != nil {
		st.MaxBytes = *body.MaxBytes
	}
	st, err := s.cfg.Recordings.SetSettings(st)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	n, b := s.cfg.Recordings.Usage()
	writeJSON(w, http.StatusOK, recordingSettingsJSON{Settings: st, Count: n, Bytes: b})
}

// replayRecording serves the replay stream: a websocket (subprotocol cubicle.computer.v2)
// carrying the recording's messages as the live channel sends them, from ?from=MS at
// ?speed=X, with "replay" position messages; the client sends seek, speed, pause and play.
func (s *Server) replayRecording(w http.ResponseWriter, r *http.Request) {
	p, _, ok := s.websocketCaller(w, r)
	if !ok {
		return
	}
	rid := r.PathValue("rid")
	info, err := s.ownRecording(r.Context(), p, r.PathValue("id"), rid)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	q := r.URL.Query()
	var from int64
	if v := q.Get("from"); v != "" {
		if from, err = strconv.ParseInt(v, 10, 64); err != nil || from < 0 {
			writeError(w, r, s.log, fault.Invalid("from is a time in the recording in milliseconds (0 or more)"))
			return
		}
	}
	speed := 1.0
	if v := q.Get("speed"); v != "" {
		if speed, err = strconv.ParseFloat(v, 64); err != nil {
			writeError(w, r, s.log, fault.Invalid("speed is a number such as 0.5, 1, 2 or 8"))
			return
		}
		if err := recording.CheckSpeed(speed); err != nil {
			writeError(w, r, s.log, fault.Invalid("%v", err))
			return
		}
	}
	if !isUpgrade(r) {
		writeError(w, r, s.log, fault.Invalid("the replay is a websocket: open it with the subprotocol %s", computerwire.Subprotocol))
		return
	}
	up := websocket.Upgrader{HandshakeTimeout: 10 * time.Second, Subprotocols: []string{computerwire.Subprotocol},
		CheckOrigin: func(*http.Request) bool { return true }} // the guard has checked the origin
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer ws.Close()
	ws.SetReadLimit(liveview.ReadLimit)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ctrl := make(chan recording.Control, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the reader: the client's controls; its end ends the replay
		defer wg.Done()
		defer cancel()
		for {
			_, raw, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var c recording.Control
			if json.Unmarshal(raw, &c) != nil {
				continue
			}
			select {
			case ctrl <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	out := &replaySink{ws: ws}
	if err := s.cfg.Recordings.Play(ctx, info, time.Duration(from)*time.Millisecond, speed, ctrl, out); err != nil && ctx.Err() == nil {
		s.log.Warn("recording replay", "recording", rid, "err", err)
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseInternalServerErr, "the replay failed"), time.Now().Add(time.Second))
	} else {
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	}
	ws.Close()
	cancel()
	wg.Wait()
}

// replaySink writes a player's output to the websocket.
type replaySink struct{ ws *websocket.Conn }

func (k *replaySink) Record(r recording.Record) error {
	k.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	t := websocket.TextMessage
	if r.Kind == recording.KindUpdate {
		t = websocket.BinaryMessage
	}
	return k.ws.WriteMessage(t, r.Data)
}

func (k *replaySink) Position(p recording.Position) error {
	k.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return k.ws.WriteJSON(p)
}
