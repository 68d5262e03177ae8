package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
)

// Chat runs chat turns (agent.Runtime).
type Chat interface {
	Run(ctx context.Context, t agent.Turn, emit func(agent.Event)) error
	Stop(userID, sessionID string) bool
}

type chatBody struct {
	SessionID      string                `json:"sessionId"`
	UserID         string                `json:"userId"`
	AgentID        string                `json:"agentId"`
	Input          string                `json:"input"`
	ChatModel      *agent.ChatModel      `json:"chatModel,omitempty"`
	ConfirmResults []agent.ConfirmResult `json:"confirmResults,omitempty"`
}

// chat streams one turn (SPEC §2.1): SSE for Accept: text/event-stream, otherwise a JSON
// array written incrementally. The userId must be the caller's own account.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var b chatBody
	if err := decode(r, &b); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p := principal(r)
	if b.SessionID == "" || b.UserID == "" || (strings.TrimSpace(b.Input) == "" && b.ConfirmResults == nil) {
		writeError(w, r, s.log, fault.Invalid("sessionId, userId and input are required"))
		return
	}
	if b.UserID != p.AccountID && b.UserID != p.Username {
		writeError(w, r, s.log, fault.Forbidden("userId must be your own account"))
		return
	}
	turn := agent.Turn{SessionID: b.SessionID, UserID: p.AccountID, AgentID: b.AgentID, Input: b.Input,
		ChatModel: b.ChatModel, ConfirmResults: b.ConfirmResults}
	if b.AgentID != "" {
		a, err := s.cfg.Profiles.Get(p.AccountID, b.AgentID)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		turn.AgentName = a.Name
	}
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	fl, _ := w.(http.Flusher)
	started := false
	first := true
	emit := func(e agent.Event) {
		if !started {
			started = true
			h := w.Header()
			h.Set("Cache-Control", "no-store")
			h.Set("X-Accel-Buffering", "no")
			if sse {
				h.Set("Content-Type", "text/event-stream; charset=utf-8")
			} else {
				h.Set("Content-Type", "application/json; charset=utf-8")
				w.Write([]byte("[\n"))
			}
			w.WriteHeader(http.StatusOK)
		}
		raw, err := json.Marshal(e)
		if err != nil {
			s.log.Error("encode event", "err", err)
			return
		}
		if sse {
			w.Write([]byte("data: "))
			w.Write(raw)
			w.Write([]byte("\n\n"))
		} else {
			if !first {
				w.Write([]byte(",\n"))
			}
			w.Write(raw)
		}
		first = false
		if fl != nil {
			fl.Flush()
		}
	}
	if err := s.cfg.Chat.Run(r.Context(), turn, emit); err != nil {
		if !started {
			writeError(w, r, s.log, err)
			return
		}
		s.log.Warn("chat turn failed mid-stream", "err", err)
	}
	if started && !sse {
		w.Write([]byte("\n]\n"))
	}
}

// chatStop asks a running turn to stop: {sessionId}.
func (s *Server) chatStop(w http.ResponseWriter, r *http.Request) {
	var b struct {
		SessionID string `json:"sessionId"`
	}
	if err := decode(r, &b); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if b.SessionID == "" {
		writeError(w, r, s.log, fault.Invalid("sessionId is required"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stopped": s.cfg.Chat.Stop(principal(r).AccountID, b.SessionID)})
}

func (s *Server) needChat(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Chat == nil {
			writeError(w, r, s.log, fault.Unavailable("chat is not available in this mode"))
			return
		}
		h(w, r)
	}
}
