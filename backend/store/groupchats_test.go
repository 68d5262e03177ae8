package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"cubicle/backend/fault"
)

// TestGroupChats: a group chat belongs to its account; its transcript reads back in order
// (past 255 entries, where a little-endian or decimal key would sort wrong) and from a point.
func TestGroupChats(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "c.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC)
	g := GroupChat{ID: "g-1", AccountID: "a1", Title: "t", AgentIDs: []string{"x", "y"}, CreatedAt: at, UpdatedAt: at}
	if err := s.CreateGroupChat(g); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateGroupChat(g); !errors.Is(err, fault.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := s.CreateGroupChat(GroupChat{ID: "g-2", AccountID: "a1"}); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("no members: %v", err)
	}
	if _, err := s.GroupChat("a2", "g-1"); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("another account reads it: %v", err)
	}
	if _, err := s.GroupEntries("a2", "g-1", 0); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("another account reads its transcript: %v", err)
	}
	if _, err := s.AppendGroupEntry("a2", "g-1", GroupEntry{Text: "x", At: at}, nil); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("another account writes to it: %v", err)
	}
	const n = 300
	for i := range n {
		_, err := s.AppendGroupEntry("a1", "g-1", GroupEntry{Role: "user", AgentID: "x", Text: fmt.Sprint(i), At: at.Add(time.Duration(i) * time.Second)},
			func(g *GroupChat, seq uint64) { g.LastAgentID = fmt.Sprint(seq) })
		if err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.GroupEntries("a1", "g-1", 0)
	if err != nil || len(all) != n {
		t.Fatalf("entries: %d, %v", len(all), err)
	}
	for i, e := range all {
		if e.Text != fmt.Sprint(i) || (i > 0 && e.Seq <= all[i-1].Seq) {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	tail, err := s.GroupEntries("a1", "g-1", all[n-3].Seq)
	if err != nil || len(tail) != 2 || tail[0].Text != fmt.Sprint(n-2) {
		t.Fatalf("after %d: %+v, %v", all[n-3].Seq, tail, err)
	}
	got, err := s.GroupChat("a1", "g-1")
	if err != nil || got.LastAgentID != fmt.Sprint(all[n-1].Seq) || !got.UpdatedAt.Equal(at.Add((n-1)*time.Second)) {
		t.Fatalf("chat after appends: %+v, %v", got, err)
	}
	if list, err := s.GroupChats("a2"); err != nil || len(list) != 0 {
		t.Fatalf("a2's list: %+v, %v", list, err)
	}
}
