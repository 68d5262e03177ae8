package tools

import (
	"errors"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

func TestEdit(t *testing.T) {
	for _, c := range []struct {
		name, in string
		a        args
		want     string // "" = an error containing err
		err      string
	}{
		{"replace once", "a\nhi there\nb\n", args{"old_str": "hi", "new_str": "ho"}, "a\nho there\nb\n", ""},
		{"replace deletes without new_str", "keep drop keep", args{"old_str": " drop"}, "keep keep", ""},
		{"replace multi-line", "x\ny\nz\n", args{"old_str": "x\ny\n", "new_str": "q\n"}, "q\nz\n", ""},
		{"not found", "abc", args{"old_str": "zz", "new_str": "y"}, "", "was not found"},
		{"twice", "hi hi", args{"old_str": "hi", "new_str": "y"}, "", "occurs 2 times"},
		{"empty old_str", "abc", args{"old_str": "", "new_str": "y"}, "", "non-empty"},
		{"new_str not text", "abc", args{"old_str": "a", "new_str": 3.0}, "", "must be text"},
		{"insert at top", "a\nb\n", args{"insert_line": 0.0, "text": "top"}, "top\na\nb\n", ""},
		{"insert after line 1", "a\nb\n", args{"insert_line": 1.0, "text": "mid\n"}, "a\nmid\nb\n", ""},
		{"insert at end", "a\nb\n", args{"insert_line": 2.0, "text": "end"}, "a\nb\nend\n", ""},
		{"insert after a last line without newline", "a\nb", args{"insert_line": 2.0, "text": "c"}, "a\nb\nc\n", ""},
		{"insert into an empty file", "", args{"insert_line": 0.0, "text": "only"}, "only\n", ""},
		{"insert past the end", "a\n", args{"insert_line": 3.0, "text": "x"}, "", "past the end"},
		{"insert negative", "a\n", args{"insert_line": -1.0, "text": "x"}, "", "≥ 0"},
		{"insert without text", "a\n", args{"insert_line": 1.0}, "", `"text"`},
		{"binary file", "a\x00b", args{"old_str": "a", "new_str": "b"}, "", "binary"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !isEdit(c.a) {
				t.Fatalf("isEdit(%v) = false", c.a)
			}
			got, said, err := edit("f.txt", []byte(c.in), c.a)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, fault.ErrInvalid) {
					t.Fatalf("edit = %q, %v; want an invalid-argument error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || string(got) != c.want || !strings.Contains(said, "f.txt") {
				t.Fatalf("edit = %q (%q), %v; want %q", got, said, err, c.want)
			}
		})
	}
	if isEdit(args{"path": "a", "content": "x"}) {
		t.Fatal("a whole-content write is not an edit")
	}
}
