package api

import (
	"context"
	"net/http"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/groupchat"
)

// Groups are the group chats (groupchat.Service). Every method is scoped to the caller's
// account: another account's chat is fault.ErrNotFound.
type Groups interface {
	Create(accountID, title string, agentIDs []string) (groupchat.Chat, error)
	List(accountID string) ([]groupchat.Chat, error)
	Get(accountID, id string) (groupchat.Transcript, error)
	Send(ctx context.Context, m groupchat.Message, emit func(agent.Event)) error
}

func (s *Server) groupChatRoutes(mux *router) {
	mux.Handle("GET /api/app/chats", s.authed(s.needGroups(s.listGroupChats)))
	mux.Handle("POST /api/app/chats", s.authed(s.needGroups(s.createGroupChat)))
	mux.Handle("GET /api/app/chats/{id}", s.authed(s.needGroups(s.getGroupChat)))
}

func (s *Server) needGroups(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Groups == nil {
			writeError(w, r, s.log, fault.Unavailable("group chats are not available in this mode"))
			return
		}
		h(w, r)
	}
}

// createGroupChat makes a group chat of the caller's agents: {title, agentIds} → 201 the chat.
func (s *Server) createGroupChat(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Title    string   `json:"title"`
		AgentIDs []string `json:"agentIds"`
	}
	if err := decode(r, &b); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	c, err := s.cfg.Groups.Create(principal(r).AccountID, b.Title, b.AgentIDs)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusCreated, c)
}

// listGroupChats answers the caller's own group chats: {chats: [...]}.
func (s *Server) listGroupChats(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.Groups.List(principal(r).AccountID)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"chats": list})
}

// getGroupChat answers one of the caller's group chats with its transcript.
func (s *Server) getGroupChat(w http.ResponseWriter, r *http.Request) {
	t, err := s.cfg.Groups.Get(principal(r).AccountID, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// groupChat streams the turn of the member a group chat message goes to: POST /api/app/chat
// {chatId, message, to?, confirmResults?, clientTools?}.
func (s *Server) groupChat(w http.ResponseWriter, r *http.Request, b chatBody) {
	if s.cfg.Groups == nil {
		writeError(w, r, s.log, fault.Unavailable("group chats are not available in this mode"))
		return
	}
	text := b.Message
	if text == "" {
		text = b.Input // a client that sends the single-chat field
	}
	if strings.TrimSpace(text) == "" && b.ConfirmResults == nil {
		writeError(w, r, s.log, fault.Invalid("message is required: {chatId, message, to?}"))
		return
	}
	m := groupchat.Message{AccountID: principal(r).AccountID, ChatID: b.ChatID, Text: text, To: b.To,
		ConfirmResults: b.ConfirmResults, ClientTools: b.ClientTools}
	s.streamTurn(w, r, func(emit func(agent.Event)) error {
		return s.cfg.Groups.Send(r.Context(), m, emit)
	})
}
