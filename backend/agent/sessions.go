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

// save writes s to the store; a failure is logged (a checkpoint during a turn: the turn goes
// on, and the next checkpoint tries again).
func (r *Runtime) save(s *session, userID, sessionID string) {
	if err := r.trySave(s, userID, sessionID); err != nil {
		r.log.Error("save chat", "session", sessionID, "err", err)
	}
}

// trySave writes s to the store.
func (r *Runtime) trySave(s *session, userID, sessionID string) error {
	if r.cfg.Sessions == nil {
		return nil
	}
	s.history = trimImages(s.history, KeepImages)
	hist, err := json.Marshal(s.history)
	if err != nil {
		return fmt.Errorf("save chat: %w", err)
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
		History: hist, Pending: pending, ActiveTurn: s.active, CreatedAt: s.created, UpdatedAt: now}
	if err := r.cfg.Sessions.PutChatSession(c); err != nil {
		return fmt.Errorf("save chat: %w", err)
	}
	return nil
}

// ActiveTurns lists the saved conversations whose turn was marked running (the store
// implements it).
type ActiveTurns interface {
	ChatSessionsWithActiveTurn() ([]store.ChatSession, error)
}

// InterruptedText is what the conversation shows where a turn was cut short by Cubicle
// stopping (a crash, a kill, a power cut).
const InterruptedText = "This turn was interrupted: Cubicle stopped while it was running, so its last step did not finish. " +
	"Send a message to continue."

// RecoverInterrupted closes, in the saved conversations src lists, the turns a crash left
// running: each tool call without a result gets an "interrupted" result (so the conversation
// stays valid for the model), and an assistant message marked metadata.interrupted says what
// happened. The person's message that started the turn is already saved (Run saves it before
// the model or any tool runs). Call it at start-up, before any turn runs; it returns how many
// turns it closed. Conversations it cannot read are logged and skipped.
func (r *Runtime) RecoverInterrupted(src ActiveTurns) (int, error) {
	if r.cfg.Sessions == nil {
		return 0, nil
	}
	list, err := src.ChatSessionsWithActiveTurn()
	if err != nil {
		return 0, fmt.Errorf("find interrupted turns: %w", err)
	}
	n := 0
	for _, c := range list {
		var hist []Msg
		if len(c.History) > 0 {
			if err := json.Unmarshal(c.History, &hist); err != nil {
				r.log.Error("interrupted turn: corrupt history", "session", c.SessionID, "err", err)
				continue
			}
		}
		turn := c.ActiveTurn
		hist = closeInterrupted(hist, turn, time.Now().UTC())
		raw, err := json.Marshal(hist)
		if err != nil {
			return n, err
		}
		c.History, c.ActiveTurn, c.UpdatedAt = raw, nil, time.Now().UTC()
		if err := r.cfg.Sessions.PutChatSession(c); err != nil {
			return n, fmt.Errorf("close interrupted turn of %s: %w", c.SessionID, err)
		}
		r.log.Info("closed a turn interrupted by a restart", "session", c.SessionID, "turn", turn.ID)
		n++
	}
	return n, nil
}

// closeInterrupted answers every tool call in hist that has no result with an interrupted
// one and appends the interruption notice.
func closeInterrupted(hist []Msg, turn *store.ActiveTurn, now time.Time) []Msg {
	answered := map[string]bool{}
	for _, m := range hist {
		for _, b := range m.Content {
			if b.Type == "tool_result" {
				answered[b.ToolCallID] = true
			}
		}
	}
	results := Msg{ID: NewID(), Name: "tools", Role: "user", Timestamp: now}
	for _, m := range hist {
		for _, b := range m.Content {
			if b.Type == "tool_use" && !answered[b.ToolCallID] {
				results.Content = append(results.Content, ContentBlock{Type: "tool_result", ToolCallID: b.ToolCallID, Name: b.Name,
					State: StateInterrupted, Content: []ContentBlock{{Type: "text", Text: "Interrupted: Cubicle stopped while this ran."}}})
			}
		}
	}
	if len(results.Content) > 0 {
		hist = append(hist, results)
	}
	meta := map[string]any{"interrupted": true}
	if turn != nil {
		meta["turnId"] = turn.ID
		meta["turnStartedAt"] = turn.StartedAt
	}
	return append(hist, Msg{ID: NewID(), Name: "Cubicle", Role: "assistant", Timestamp: now, Metadata: meta,
		Content: []ContentBlock{{Type: "text", Text: InterruptedText}}})
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
