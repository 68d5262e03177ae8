package auth

import (
	"errors"
	"testing"

	"cubicle/backend/fault"
)

// TestLookAlikeUsernames: a username is normalised (PRECIS UsernameCasePreserved: width
// folded, NFC) and one with invisible characters is refused; one that merely looks like an
// existing account's name (another script's letters, "rn" for "m", dotless i) is refused
// too, so that nobody can pass for another in the Users list, a grant or a log.
func TestLookAlikeUsernames(t *testing.T) {
	s, st := newService(t, nil)
	root := admin(t, s)
	for _, c := range []struct {
		name  string
		class error
	}{
		{"ad\u200bmin", fault.ErrInvalid}, // zero-width space
		{"ad\u2060min", fault.ErrInvalid}, // word joiner
		{"ad\u00admin", fault.ErrInvalid}, // soft hyphen
		{"adm\u200din", fault.ErrInvalid}, // zero-width joiner
		{"\u202eadmin", fault.ErrInvalid}, // right-to-left override
		{"ａｄｍｉｎ", fault.ErrExists},        // full-width: is "admin"
		{"\u0430dmin", fault.ErrExists},   // Cyrillic a
		{"adm\u0131n", fault.ErrExists},   // dotless i
		{"adrnin", fault.ErrExists},       // rn for m
		{"ADMIN", fault.ErrExists},        // letter case
	} {
		_, err := s.CreateAccount(root, NewAccount{Username: c.name, Password: "a long enough password 1", Role: "member"})
		if err == nil {
			t.Errorf("username %+q was accepted beside %q", c.name, "admin")
			continue
		}
		if !errors.Is(err, c.class) {
			t.Errorf("username %+q: %v; want %v", c.name, err, c.class)
		}
	}
	// Ordinary names still work, stored as given (normalised).
	for _, name := range []string{"mia", "José", "anna-lena", "bob.smith", "李雷"} {
		a, err := s.CreateAccount(root, NewAccount{Username: name, Password: "a long enough password 1", Role: "member"})
		if err != nil || a.Username != name {
			t.Errorf("username %q: %+v, %v", name, a, err)
		}
	}
	// A decomposed é is stored composed, and is the same name.
	if _, err := s.CreateAccount(root, NewAccount{Username: "Jose\u0301", Password: "a long enough password 1"}); !errors.Is(err, fault.ErrExists) {
		t.Errorf("decomposed José beside José: %v", err)
	}
	if accts, _ := st.Accounts(); len(accts) != 6 {
		t.Errorf("%d accounts; want the admin and the five ordinary ones", len(accts))
	}
}
