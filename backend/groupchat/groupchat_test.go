package groupchat

import (
	"errors"
	"testing"

	"cubicle/backend/fault"
)

func TestPick(t *testing.T) {
	c := Chat{Members: []Member{{AgentID: "a1", Name: "Ada"}, {AgentID: "b1", Name: "Ada Two"}, {AgentID: "c1", Name: "Cy", Missing: true}, {AgentID: "d1", Name: "Dee"}}}
	after := func(id string) Chat { x := c; x.LastAgentID = id; return x }
	tests := []struct {
		name     string
		chat     Chat
		text, to string
		waiting  []string
		want     string
		class    error
	}{
		{"first at first", c, "hi", "", nil, "a1", nil},
		{"after the last", after("a1"), "hi", "", nil, "b1", nil},
		{"skips a deleted member", after("b1"), "hi", "", nil, "d1", nil},
		{"wraps around", after("d1"), "hi", "", nil, "a1", nil},
		{"@name", after("a1"), "@ada hi", "", nil, "a1", nil},
		{"longest @name", c, "@Ada Two: hi", "", nil, "b1", nil},
		{"@name needs a word end", c, "@Adam hi", "", nil, "", fault.ErrInvalid},
		{"@id", c, "  @d1 hi", "", nil, "d1", nil},
		{"to by name", c, "@ada hi", "dee", nil, "d1", nil},
		{"to by @name", c, "hi", "@Dee", nil, "d1", nil},
		{"to not a member", c, "hi", "zed", nil, "", fault.ErrInvalid},
		{"to a deleted member", c, "hi", "c1", nil, "", fault.ErrConflict},
		{"waiting member answers", after("a1"), "yes", "", []string{"d1"}, "d1", nil},
		{"an address beats waiting", c, "@ada yes", "", []string{"d1"}, "a1", nil},
		{"all deleted", Chat{Members: []Member{{AgentID: "x", Missing: true}}}, "hi", "", nil, "", fault.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Pick(tt.chat, tt.text, tt.to, tt.waiting)
			if tt.class != nil {
				if !errors.Is(err, tt.class) {
					t.Fatalf("err %v, want class %v", err, tt.class)
				}
				return
			}
			if err != nil || m.AgentID != tt.want {
				t.Fatalf("picked %q (%v), want %q", m.AgentID, err, tt.want)
			}
		})
	}
}

func TestMemberSession(t *testing.T) {
	id := MemberSession("g-0123456789abcdef", "4d1b1d76a81834a3925619d9e0db089c")
	if !IsMemberSession(id) || IsMemberSession("s-0d3c") || IsMemberSession("g-only") {
		t.Fatalf("IsMemberSession wrong for %q", id)
	}
}
