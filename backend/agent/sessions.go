package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// SessionStore keeps conversations across restarts (the store implements it).
type SessionStore interface {
	ChatSession(userID, sessionID string) (store.ChatSession, error)
	PutChatSession(c store.ChatSession) error
}

// KeepImages is how many of a conversation's newest screenshots are kept in what is sent to
// the model and saved; older ones become a short text note (they cost tokens and disk and
// describe a screen that no longer exists).
const KeepImages = 3

// load fills s from the store when the runtime has not seen the conversation since start.
func (r *Runtime) load(s *session, userID, sessionID string) error {
	if s.loaded || r.cfg.Sessions == nil {
		s.loaded = true
		return nil
	}
	c, err := r.cfg.Sessions.ChatSession(userID, sessionID)
	switch {
	case errors.Is(err, fault.ErrNotFound):
		s.loaded = true
		return nil
	case err != nil:
		return fmt.Errorf("load chat: %w", err)
	}
	if len(c.History) > 0 {
		if err := json.Unmarshal(c.History, &s.history); err != nil {
			return fmt.Errorf("load chat: corrupt history: %w", err)
		}
	}
	if len(c.Pending) > 0 {
		if err := json.Unmarshal(c.Pending, &s.pending); err != nil {
			return fmt.Errorf("load chat: corrupt pending calls: %w", err)
		}
	}
	s.agentID, s.title, s.created = c.AgentID, c.Title, c.CreatedAt
	s.loaded = true
	return nil
}

// save writes s to the store.
func (r *Runtime) save(s *session, userID, sessionID string) {
	if r.cfg.Sessions == nil {
		return
	}
	s.history = trimImages(s.history, KeepImages)
	hist, err := json.Marshal(s.history)
	if err != nil {
		r.log.Error("save chat", "err", err)
		return
	}
	var pending json.RawMessage
	if len(s.pending) > 0 {
		pending, _ = json.Marshal(s.pending)
	}
	now := time.Now().UTC()
	if s.created.IsZero() {
		s.created = now
	}
	c := store.ChatSession{UserID: userID, SessionID: sessionID, AgentID: s.agentID, Title: s.title,
		History: hist, Pending: pending, CreatedAt: s.created, UpdatedAt: now}
	if err := r.cfg.Sessions.PutChatSession(c); err != nil {
		r.log.Error("save chat", "session", sessionID, "err", err)
	}
}

// trimImages replaces all but the newest keep images in msgs with a text note. It returns a
// new slice; msgs is not changed.
func trimImages(msgs []Msg, keep int) []Msg {
	seen := 0
	out := make([]Msg, len(msgs))
	copy(out, msgs)
	for i := len(out) - 1; i >= 0; i-- {
		out[i].Content = trimBlocks(out[i].Content, keep, &seen)
	}
	return out
}

func trimBlocks(blocks []ContentBlock, keep int, seen *int) []ContentBlock {
	if len(blocks) == 0 {
		return blocks
	}
	out := make([]ContentBlock, len(blocks))
	for j := len(blocks) - 1; j >= 0; j-- {
		b := blocks[j]
		switch b.Type {
		case "image":
			*seen++
			if *seen > keep {
				b = ContentBlock{Type: "text", Text: "[older screenshot omitted]"}
			}
		case "tool_result":
			b.Content = trimBlocks(b.Content, keep, seen)
		}
		out[j] = b
	}
	return out
}
