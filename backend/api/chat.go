package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/groupchat"
	"cubicle/backend/history"
	"cubicle/backend/store"
)

// Chat runs chat turns (agent.Runtime).
type Chat interface {
	Run(ctx context.Context, t agent.Turn, emit func(agent.Event)) error
	Stop(userID, sessionID string) bool
	// ExternalResult hands a client's result to an external tool call waiting in the
	// caller's conversation (fault.ErrNotFound when none waits there).
	ExternalResult(userID, sessionID string, r agent.ExternalResult) error
}

// externalPath is the route a client posts an external tool's result to.
const externalPath = "/api/app/chat/external"

type chatBody struct {
	SessionID      string                `json:"sessionId"`
	UserID         string                `json:"userId"`
	AgentID        string                `json:"agentId"`
	Input          string                `json:"input"`
	ChatModel      *agent.ChatModel      `json:"chatModel,omitempty"`
	ConfirmResults []agent.ConfirmResult `json:"confirmResults,omitempty"`
	// ClientTools are the external tools this client can run (agent.ExternalTools).
	ClientTools []string `json:"clientTools,omitempty"`
	// ChatID, Message and To are a message to a group chat (groupchats.go).
	ChatID  string `json:"chatId,omitempty"`
	Message string `json:"message,omitempty"`
	To      string `json:"to,omitempty"`
}

// chat streams one turn (SPEC §2.1): SSE for Accept: text/event-stream, otherwise a JSON
// array written incrementally. The userId must be the caller's own account. A body with a
// chatId is a message to a group chat (groupChat). Every event carries the turn's agentId.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var b chatBody
	if err := decode(r, &b); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	p := principal(r)
	if b.ChatID != "" {
		s.groupChat(w, r, b)
		return
	}
	if b.SessionID == "" || b.UserID == "" || (strings.TrimSpace(b.Input) == "" && b.ConfirmResults == nil) {
		writeError(w, r, s.log, fault.Invalid("sessionId, userId and input are required"))
		return
	}
	if !validSessionID(b.SessionID) {
		writeError(w, r, s.log, fault.Invalid("sessionId must be 1–128 letters, digits, '-', '_' or '.'"))
		return
	}
	if b.UserID != p.AccountID && b.UserID != p.Username {
		writeError(w, r, s.log, fault.Forbidden("userId must be your own account"))
		return
	}
	turn := agent.Turn{SessionID: b.SessionID, UserID: p.AccountID, AgentID: b.AgentID, Input: b.Input,
		ChatModel: b.ChatModel, ConfirmResults: b.ConfirmResults, ClientTools: b.ClientTools}
	if b.AgentID != "" {
		a, err := s.cfg.Profiles.Get(p.AccountID, b.AgentID)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		turn.AgentName = a.Name
	}
	s.streamTurn(w, r, func(emit func(agent.Event)) error {
		return s.cfg.Chat.Run(r.Context(), turn, func(e agent.Event) {
			if e.AgentID == "" {
				e.AgentID = turn.AgentID
			}
			emit(e)
		})
	})
}

// streamTurn writes the events run emits: SSE for Accept: text/event-stream, otherwise a JSON
// array written incrementally. An error before the first event is answered as an error
// status; after it, the stream has already said how the turn ended.
func (s *Server) streamTurn(w http.ResponseWriter, r *http.Request, run func(emit func(agent.Event)) error) {
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
	if err := run(emit); err != nil {
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

// chatExternal takes an external tool's result from the client that ran it: {sessionId,
// toolCallId, state, content, error}. Only a call waiting in the caller's own conversation
// takes it (404 otherwise; the conversation is keyed by the caller's account).
func (s *Server) chatExternal(w http.ResponseWriter, r *http.Request) {
	var b struct {
		SessionID string `json:"sessionId"`
		agent.ExternalResult
	}
	if err := decode(r, &b); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if b.SessionID == "" || b.ToolCallID == "" {
		writeError(w, r, s.log, fault.Invalid("sessionId and toolCallId are required"))
		return
	}
	if err := s.cfg.Chat.ExternalResult(principal(r).AccountID, b.SessionID, b.ExternalResult); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"accepted": true})
}

func (s *Server) needChat(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Chat == nil || s.cfg.Chats == nil {
			writeError(w, r, s.log, fault.Unavailable("chat is not available in this mode"))
			return
		}
		h(w, r)
	}
}

// ChatStore is the part of the store the chat history routes read.
type ChatStore interface {
	ChatSessions(userID string) ([]store.ChatSession, error)
	ChatSession(userID, sessionID string) (store.ChatSession, error)
	ToolRuns(userID, sessionID string) ([]store.ToolRun, error)
}

func (s *Server) listChats(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.Chats.ChatSessions(principal(r).AccountID)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	agentID := r.URL.Query().Get("agentId")
	out := []store.ChatSession{}
	for _, c := range list {
		// A member's conversation in a group chat is read through its group chat.
		if groupchat.IsMemberSession(c.SessionID) {
			continue
		}
		if agentID == "" || c.AgentID == agentID {
			out = append(out, c)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
}

func (s *Server) getChat(w http.ResponseWriter, r *http.Request) {
	c, err := s.cfg.Chats.ChatSession(principal(r).AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// chatHistory answers the session's execution timeline (SPEC §2.5).
func (s *Server) chatHistory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.cfg.Chats.ChatSession(principal(r).AccountID, id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	tl, err := history.Query(s.cfg.Chats, principal(r).AccountID, id)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, tl)
}

// chatHistoryExport answers the session's execution history as JSON Lines, one tool run per
// line (a download: history-<id>.jsonl).
func (s *Server) chatHistoryExport(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.cfg.Chats.ChatSession(principal(r).AccountID, id); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	var buf bytes.Buffer
	if err := history.Export(s.cfg.Chats, principal(r).AccountID, id, &buf); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/jsonl; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	if validSessionID(id) {
		h.Set("Content-Disposition", `attachment; filename="history-`+id+`.jsonl"`)
	}
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

func validSessionID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
