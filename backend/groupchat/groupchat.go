// Package groupchat is Cubicle's group chats: one person's conversation with several of
// their agents (SPEC §1.8, docs/group-chats.md).
//
// A group chat is a stored record (store.GroupChat) owned by one account. Each member agent
// keeps its own conversation underneath, a chat session of its own (MemberSession: the chat's
// id and the agent's id), so its history, guard state, confirmations, model and computer are
// its own and the runtime's per-session machinery works unchanged. A message goes to one
// member (Pick): the one it addresses (`to`, or `@name` at its start), else the member whose
// conversation waits for a confirmation, else the member after the one who acted last. That
// member's turn gets the message and, before it, what was said in the group since its own
// last turn (the person's messages to others and the others' final answers, by name).
//
// The transcript — the person's messages and the members' final answers, in order — is kept
// beside the chat (store.GroupEntry); the members' full turns (tools, screenshots) stay in
// their own sessions.
//
// Concurrency: Service is safe for concurrent use. Turns of different members may run at the
// same time (each member's conversation runs one turn at a time; a second is refused by the
// runtime with fault.ErrConflict before anything is recorded).
package groupchat

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// MaxMembers is the most agents one group chat may have.
const MaxMembers = 8

// maxTitle is the longest title, in characters.
const maxTitle = 100

// Runner runs one agent turn (agent.Runtime.Run), calling emit for every event in order from
// the calling goroutine. Input errors are returned before any event.
type Runner interface {
	Run(ctx context.Context, t agent.Turn, emit func(agent.Event)) error
}

// Agents finds an account's agents (profile.Service.Get): another account's agent is
// fault.ErrNotFound.
type Agents interface {
	Get(accountID, id string) (store.Agent, error)
}

// Store keeps group chats and reads the members' conversations (the store implements it).
type Store interface {
	CreateGroupChat(g store.GroupChat) error
	GroupChat(accountID, id string) (store.GroupChat, error)
	GroupChats(accountID string) ([]store.GroupChat, error)
	AppendGroupEntry(accountID, id string, e store.GroupEntry, fn func(g *store.GroupChat, seq uint64)) (uint64, error)
	GroupEntries(accountID, id string, after uint64) ([]store.GroupEntry, error)
	ChatSession(userID, sessionID string) (store.ChatSession, error)
}

// Config configures a Service; Store, Agents and Chat are required.
type Config struct {
	Store  Store
	Agents Agents
	Chat   Runner
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Service creates group chats and runs their members' turns.
type Service struct {
	cfg Config
	log *slog.Logger
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Agents == nil || cfg.Chat == nil {
		return nil, errors.New("groupchat: Config.Store, Config.Agents and Config.Chat are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, log: cfg.Logger}, nil
}

// idPrefix starts every group chat id; MemberSession joins it to an agent id with a '.'.
const idPrefix = "g-"

// MemberSession is the session id of agent agentID's own conversation in group chat chatID.
func MemberSession(chatID, agentID string) string { return chatID + "." + agentID }

// IsMemberSession reports whether a session id is a member's conversation of a group chat
// (the agent's own chat list leaves those out: they are read through their group chat).
func IsMemberSession(sessionID string) bool {
	return strings.HasPrefix(sessionID, idPrefix) && strings.Contains(sessionID, ".")
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return idPrefix + hex.EncodeToString(b)
}

// Create makes a group chat of accountID with the agents agentIDs (2 to MaxMembers of the
// account's own agents, each once). An empty title becomes the members' names. Nothing is
// created when any of it is wrong.
func (s *Service) Create(accountID, title string, agentIDs []string) (Chat, error) {
	if len(agentIDs) < 2 {
		return Chat{}, fault.Invalid("a group chat needs at least two agents: pick them in agentIds (GET /api/app/agents lists yours)")
	}
	if len(agentIDs) > MaxMembers {
		return Chat{}, fault.Invalid("a group chat has at most %d agents; you picked %d", MaxMembers, len(agentIDs))
	}
	title = strings.Join(strings.Fields(title), " ")
	if utf8.RuneCountInString(title) > maxTitle {
		return Chat{}, fault.Invalid("the title is longer than %d characters; shorten it", maxTitle)
	}
	seen := map[string]bool{}
	var names []string
	for _, id := range agentIDs {
		if seen[id] {
			return Chat{}, fault.Invalid("agent %q is picked twice; pick each agent once", id)
		}
		seen[id] = true
		a, err := s.cfg.Agents.Get(accountID, id)
		if errors.Is(err, fault.ErrNotFound) {
			return Chat{}, fault.NotFound("agent %q is not one of your agents: pick members from GET /api/app/agents", id)
		}
		if err != nil {
			return Chat{}, fmt.Errorf("group chat: %w", err)
		}
		names = append(names, a.Name)
	}
	if title == "" {
		title = strings.Join(names, ", ")
	}
	now := s.cfg.Now().UTC()
	g := store.GroupChat{ID: newID(), AccountID: accountID, Title: title, AgentIDs: append([]string(nil), agentIDs...),
		CreatedAt: now, UpdatedAt: now}
	if err := s.cfg.Store.CreateGroupChat(g); err != nil {
		return Chat{}, fmt.Errorf("create group chat: %w", err)
	}
	s.log.Info("group chat created", "chat", g.ID, "account", accountID, "members", len(agentIDs))
	return s.view(g), nil
}

// List returns accountID's group chats, most recently updated first.
func (s *Service) List(accountID string) ([]Chat, error) {
	list, err := s.cfg.Store.GroupChats(accountID)
	if err != nil {
		return nil, fmt.Errorf("list group chats: %w", err)
	}
	out := make([]Chat, 0, len(list))
	for _, g := range list {
		out = append(out, s.view(g))
	}
	return out, nil
}

// Get returns accountID's group chat id with its transcript (fault.ErrNotFound for another
// account's chat).
func (s *Service) Get(accountID, id string) (Transcript, error) {
	g, err := s.cfg.Store.GroupChat(accountID, id)
	if err != nil {
		return Transcript{}, err
	}
	entries, err := s.cfg.Store.GroupEntries(accountID, id, 0)
	if err != nil {
		return Transcript{}, err
	}
	t := Transcript{Chat: s.view(g), Entries: make([]Entry, 0, len(entries))}
	for _, e := range entries {
		t.Entries = append(t.Entries, Entry(e))
	}
	for _, m := range t.Chat.Members {
		if !m.Missing && s.waiting(accountID, m.SessionID) {
			t.Waiting = append(t.Waiting, m.AgentID)
		}
	}
	return t, nil
}

// view converts a stored chat, naming its members as they are now.
func (s *Service) view(g store.GroupChat) Chat {
	c := Chat{ID: g.ID, Title: g.Title, CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt, LastAgentID: g.LastAgentID,
		Members: make([]Member, 0, len(g.AgentIDs))}
	for _, id := range g.AgentIDs {
		m := Member{AgentID: id, SessionID: MemberSession(g.ID, id)}
		if a, err := s.cfg.Agents.Get(g.AccountID, id); err == nil {
			m.Name, m.Computer = a.Name, a.Computer
		} else {
			m.Missing = true
		}
		c.Members = append(c.Members, m)
	}
	return c
}

// waiting reports whether a member's conversation waits for a person's confirmation.
func (s *Service) waiting(accountID, sessionID string) bool {
	c, err := s.cfg.Store.ChatSession(accountID, sessionID)
	return err == nil && len(c.Pending) > 0 && string(c.Pending) != "null"
}

// Message is one message of a person to a group chat.
type Message struct {
	AccountID string
	ChatID    string
	Text      string
	// To addresses a member by agent id or name ("" : an `@name` at the start of Text, or the
	// member whose turn it is).
	To string
	// ConfirmResults answer the acting member's paused confirmation (agent.Turn).
	ConfirmResults []agent.ConfirmResult
	// ClientTools are the external tools the client can run (agent.Turn).
	ClientTools []string
}

// Pick returns the member a message goes to: To when set (an agent id or name), else an
// `@name` at the start of the text, else the first member whose conversation waits for a
// confirmation, else the member after the one who acted last (the first member at first).
// A To or an @name that names no member is fault.ErrInvalid, saying whom to address.
func Pick(c Chat, text, to string, waiting []string) (Member, error) {
	var live []Member
	for _, m := range c.Members {
		if !m.Missing {
			live = append(live, m)
		}
	}
	if len(live) == 0 {
		return Member{}, fault.Conflict("every agent of this group chat was deleted; start a new group chat")
	}
	if to = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(to), "@")); to != "" {
		for _, m := range c.Members {
			if m.AgentID == to || (!m.Missing && strings.EqualFold(m.Name, to)) {
				if m.Missing {
					return Member{}, fault.Conflict("agent %q was deleted; address another member: %s", to, names(live))
				}
				return m, nil
			}
		}
		return Member{}, fault.Invalid("%q is not a member of this group chat; address one of: %s", to, names(live))
	}
	if m, ok, err := addressed(live, text); err != nil || ok {
		return m, err
	}
	for _, id := range waiting {
		for _, m := range live {
			if m.AgentID == id {
				return m, nil
			}
		}
	}
	for i, m := range c.Members {
		if m.AgentID != c.LastAgentID {
			continue
		}
		for j := 1; j <= len(c.Members); j++ {
			if n := c.Members[(i+j)%len(c.Members)]; !n.Missing {
				return n, nil
			}
		}
	}
	return live[0], nil
}

// addressed finds an `@name` (or `@agentId`) at the start of text: the longest member name
// that follows the '@' and ends at a space, punctuation or the end.
func addressed(live []Member, text string) (Member, bool, error) {
	text = strings.TrimLeftFunc(text, unicode.IsSpace)
	if !strings.HasPrefix(text, "@") {
		return Member{}, false, nil
	}
	rest := text[1:]
	var best Member
	bestLen := 0
	for _, m := range live {
		for _, n := range []string{m.Name, m.AgentID} {
			if len(n) <= bestLen || len(rest) < len(n) || !strings.EqualFold(rest[:len(n)], n) {
				continue
			}
			if r, _ := utf8.DecodeRuneInString(rest[len(n):]); len(rest) > len(n) && !unicode.IsSpace(r) && !unicode.IsPunct(r) {
				continue
			}
			best, bestLen = m, len(n)
		}
	}
	if bestLen == 0 {
		word, _, _ := strings.Cut(rest, " ")
		return Member{}, false, fault.Invalid("@%s is not a member of this group chat; address one of: %s", word, names(live))
	}
	return best, true, nil
}

func names(ms []Member) string {
	var out []string
	for _, m := range ms {
		out = append(out, "@"+m.Name)
	}
	return strings.Join(out, ", ")
}

// Send runs the turn of the member a message goes to (Pick), calling emit for each of its
// events, every one stamped with the member's agent id. Bad input and a member that is busy
// are returned before any event, with nothing recorded. The person's message enters the
// transcript when the turn starts (AGENT_START), the member's answer when it ends.
func (s *Service) Send(ctx context.Context, msg Message, emit func(agent.Event)) error {
	if strings.TrimSpace(msg.Text) == "" && msg.ConfirmResults == nil {
		return fault.Invalid("message is required")
	}
	g, err := s.cfg.Store.GroupChat(msg.AccountID, msg.ChatID)
	if err != nil {
		return err
	}
	c := s.view(g)
	var waiting []string
	for _, m := range c.Members {
		if !m.Missing && s.waiting(msg.AccountID, m.SessionID) {
			waiting = append(waiting, m.AgentID)
		}
	}
	m, err := Pick(c, msg.Text, msg.To, waiting)
	if err != nil {
		return err
	}
	answering := msg.ConfirmResults != nil || slices.Contains(waiting, m.AgentID)
	input, given := msg.Text, g.Seen[m.AgentID]
	if !answering {
		// What the others said since this member's own last turn comes with the message; its
		// own exchanges are in its conversation already.
		since, err := s.cfg.Store.GroupEntries(msg.AccountID, g.ID, g.Seen[m.AgentID])
		if err != nil {
			return err
		}
		input, given = s.withContext(c, m, since, msg.Text, given)
	}
	turn := agent.Turn{SessionID: m.SessionID, UserID: msg.AccountID, AgentID: m.AgentID, AgentName: m.Name,
		Input: input, ConfirmResults: msg.ConfirmResults, ClientTools: msg.ClientTools}
	started, ended := false, false
	return s.cfg.Chat.Run(ctx, turn, func(e agent.Event) {
		e.AgentID = m.AgentID
		switch {
		case e.Type == agent.AgentStart && !started:
			started = true
			if strings.TrimSpace(msg.Text) != "" {
				s.record(msg.AccountID, g.ID, store.GroupEntry{Role: "user", AgentID: m.AgentID, Text: msg.Text, At: s.cfg.Now().UTC()},
					func(g *store.GroupChat, _ uint64) {
						g.LastAgentID = m.AgentID
						if g.Seen == nil {
							g.Seen = map[string]uint64{}
						}
						if given > g.Seen[m.AgentID] {
							g.Seen[m.AgentID] = given
						}
					})
			}
		case e.Type == agent.AgentResult && !ended && e.Result != nil:
			ended = true
			if text := resultText(*e.Result); text != "" {
				_, failed := e.Result.Metadata["error"]
				s.record(msg.AccountID, g.ID, store.GroupEntry{Role: "assistant", AgentID: m.AgentID, Name: m.Name, Text: text,
					ReplyID: e.Result.ID, Error: failed, At: s.cfg.Now().UTC()}, nil)
			}
		}
		emit(e)
	})
}

// withContext puts what the others said since the member's last turn before the message,
// and returns the highest entry sequence number it gave.
func (s *Service) withContext(c Chat, m Member, since []store.GroupEntry, text string, given uint64) (string, uint64) {
	var b strings.Builder
	nameOf := map[string]string{}
	var others []string
	for _, x := range c.Members {
		nameOf[x.AgentID] = x.Name
		if x.AgentID != m.AgentID && !x.Missing {
			others = append(others, x.Name)
		}
	}
	n := 0
	for _, e := range since {
		if e.Seq > given {
			given = e.Seq
		}
		if e.AgentID == m.AgentID {
			continue
		}
		if n == 0 {
			fmt.Fprintf(&b, "[Group chat %q. You are %s; the other members are %s. What was said since your last turn:]\n",
				c.Title, m.Name, strings.Join(others, ", "))
		}
		n++
		if e.Role == "user" {
			fmt.Fprintf(&b, "Person to %s: %s\n", cmp.Or(nameOf[e.AgentID], e.AgentID), e.Text)
		} else {
			fmt.Fprintf(&b, "%s: %s\n", cmp.Or(e.Name, nameOf[e.AgentID], e.AgentID), e.Text)
		}
	}
	if n == 0 {
		return text, given
	}
	b.WriteString("[The person's message to you:]\n")
	b.WriteString(text)
	return b.String(), given
}

// record appends a transcript entry; a failure is logged (the turn has started and goes on).
func (s *Service) record(accountID, chatID string, e store.GroupEntry, fn func(*store.GroupChat, uint64)) {
	if _, err := s.cfg.Store.AppendGroupEntry(accountID, chatID, e, fn); err != nil {
		s.log.Error("group chat: record message", "chat", chatID, "role", e.Role, "err", err)
	}
}

func resultText(m agent.Msg) string {
	var parts []string
	for _, b := range m.Content {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			parts = append(parts, strings.TrimSpace(b.Text))
		}
	}
	return strings.Join(parts, "\n")
}
