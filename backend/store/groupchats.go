package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Buckets of group chats (schema version 8): the chats, keyed account\x00chat, and their
// transcripts, keyed chat\x00sequence (8 bytes, big-endian, so a cursor reads them in order).
var (
	bucketGroupChats   = []byte("group_chats")
	bucketGroupEntries = []byte("group_chat_entries")
)

// migrateGroupChatBuckets is version 7 → 8: group chats (package groupchat).
func migrateGroupChatBuckets(tx *bbolt.Tx) error {
	for _, b := range [][]byte{bucketGroupChats, bucketGroupEntries} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	return nil
}

// GroupChat is a conversation of one account with several of its agents (package groupchat).
// Each member keeps its own conversation (a ChatSession of its own); the group keeps who
// acted last, how far each member has read the transcript, and the transcript itself
// (GroupEntry).
type GroupChat struct {
	ID        string   `json:"id"`
	AccountID string   `json:"accountId"`
	Title     string   `json:"title"`
	AgentIDs  []string `json:"agentIds"`
	// LastAgentID is the member whose turn started last ("" before the first turn).
	LastAgentID string `json:"lastAgentId,omitempty"`
	// Seen is, per member, the sequence number of the last transcript entry the member has
	// been given (its own messages and what the others said before its latest turn).
	Seen      map[string]uint64 `json:"seen,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	UpdatedAt time.Time         `json:"updatedAt"`
}

// GroupEntry is one message of a group chat's transcript: a person's message (Role "user",
// AgentID the member it went to) or a member's final answer (Role "assistant").
type GroupEntry struct {
	Seq     uint64    `json:"seq"`
	Role    string    `json:"role"`
	AgentID string    `json:"agentId"`
	Name    string    `json:"name,omitempty"`
	Text    string    `json:"text"`
	ReplyID string    `json:"replyId,omitempty"`
	Error   bool      `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

func groupKey(accountID, id string) []byte { return []byte(accountID + "\x00" + id) }

func entryKey(chatID string, seq uint64) []byte {
	k := make([]byte, 0, len(chatID)+9)
	k = append(k, chatID...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// CreateGroupChat stores a new group chat (fault.ErrExists when its id is taken).
func (s *Store) CreateGroupChat(g GroupChat) error {
	if g.ID == "" || g.AccountID == "" || len(g.AgentIDs) == 0 {
		return fault.Invalid("a group chat needs an id, an account and members")
	}
	raw, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("store: encode group chat: %w", err)
	}
	return s.update("create group chat", func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketGroupChats)
		k := groupKey(g.AccountID, g.ID)
		if b.Get(k) != nil {
			return fault.Exists("group chat %q already exists", g.ID)
		}
		return b.Put(k, raw)
	})
}

func getGroup(tx *bbolt.Tx, accountID, id string) (GroupChat, error) {
	var g GroupChat
	raw := tx.Bucket(bucketGroupChats).Get(groupKey(accountID, id))
	if raw == nil {
		return g, fault.NotFound("group chat %q not found", id)
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		return g, fmt.Errorf("store: group chat %q: corrupt record: %w", id, err)
	}
	return g, nil
}

// GroupChat returns one of accountID's group chats; another account's is not found.
func (s *Store) GroupChat(accountID, id string) (GroupChat, error) {
	var g GroupChat
	err := s.view("get group chat", func(tx *bbolt.Tx) (err error) {
		g, err = getGroup(tx, accountID, id)
		return err
	})
	return g, err
}

// GroupChats lists accountID's group chats, most recently updated first.
func (s *Store) GroupChats(accountID string) ([]GroupChat, error) {
	out := []GroupChat{}
	err := s.view("list group chats", func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketGroupChats).Cursor()
		prefix := []byte(accountID + "\x00")
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var g GroupChat
			if err := json.Unmarshal(v, &g); err != nil {
				return fmt.Errorf("store: group chat %q: corrupt record: %w", k, err)
			}
			out = append(out, g)
		}
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].UpdatedAt.After(out[j].UpdatedAt) })
	return out, err
}

// AppendGroupEntry adds e to the transcript of accountID's group chat id (its Seq is
// assigned here and returned) and lets fn change the chat in the same transaction (fn may be
// nil). The chat's UpdatedAt becomes e.At. An error from fn changes nothing.
func (s *Store) AppendGroupEntry(accountID, id string, e GroupEntry, fn func(g *GroupChat, seq uint64)) (uint64, error) {
	var seq uint64
	err := s.update("append group chat entry", func(tx *bbolt.Tx) error {
		g, err := getGroup(tx, accountID, id)
		if err != nil {
			return err
		}
		entries := tx.Bucket(bucketGroupEntries)
		if seq, err = entries.NextSequence(); err != nil {
			return fmt.Errorf("store: group chat entry sequence: %w", err)
		}
		e.Seq = seq
		raw, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("store: encode group chat entry: %w", err)
		}
		if err := entries.Put(entryKey(id, seq), raw); err != nil {
			return err
		}
		if fn != nil {
			fn(&g, seq)
		}
		g.UpdatedAt = e.At
		graw, err := json.Marshal(g)
		if err != nil {
			return fmt.Errorf("store: encode group chat: %w", err)
		}
		return tx.Bucket(bucketGroupChats).Put(groupKey(accountID, id), graw)
	})
	return seq, err
}

// GroupEntries returns the transcript of accountID's group chat id after sequence number
// after (0: all of it), in order. Another account's chat is not found.
func (s *Store) GroupEntries(accountID, id string, after uint64) ([]GroupEntry, error) {
	out := []GroupEntry{}
	err := s.view("list group chat entries", func(tx *bbolt.Tx) error {
		if _, err := getGroup(tx, accountID, id); err != nil {
			return err
		}
		c := tx.Bucket(bucketGroupEntries).Cursor()
		prefix := []byte(id + "\x00")
		for k, v := c.Seek(entryKey(id, after+1)); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var e GroupEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("store: group chat entry %q: corrupt record: %w", k, err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}
