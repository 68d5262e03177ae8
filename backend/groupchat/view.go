package groupchat

import "time"

// The shapes the API answers with (a leaf file: tygo writes frontend/src/gen/groupchat.ts
// from it).

// Chat is a group chat as its owner sees it.
type Chat struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Members   []Member  `json:"members"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// LastAgentID is the member whose turn started last ("" before the first turn); without
	// an address the next message goes to the member after it.
	LastAgentID string `json:"lastAgentId,omitempty"`
}

// Member is one agent of a group chat.
type Member struct {
	AgentID string `json:"agentId"`
	// Name is the agent's name now ("" when the agent was deleted: Missing).
	Name string `json:"name"`
	// SessionID is the member's own conversation underneath the group chat: its history,
	// confirmations and stop (POST /api/app/chat/stop {sessionId}) are those of this session.
	SessionID string `json:"sessionId"`
	// Computer is the agent's computer type (none, vm, cloud, host, browser, auto).
	Computer string `json:"computer,omitempty"`
	// Missing is set when the agent no longer exists; the member can no longer be addressed.
	Missing bool `json:"missing,omitempty"`
}

// Entry is one message of the transcript: a person's message (role "user"; agentId is the
// member it went to) or a member's final answer (role "assistant"; agentId is the member).
type Entry struct {
	Seq     uint64    `json:"seq"`
	Role    string    `json:"role"`
	AgentID string    `json:"agentId"`
	Name    string    `json:"name,omitempty"`
	Text    string    `json:"text"`
	ReplyID string    `json:"replyId,omitempty"`
	Error   bool      `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

// Transcript is a group chat with its messages in order.
type Transcript struct {
	Chat    Chat    `json:"chat"`
	Entries []Entry `json:"entries"`
	// Waiting names the members whose conversation waits for a person's answer to a
	// confirmation (the next message without an address goes to the first of them).
	Waiting []string `json:"waiting,omitempty"`
}
