package guard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

func TestFileGuard(t *testing.T) {
	root := t.TempDir()
	secrets := filepath.Join(root, "app", "secrets")
	work := filepath.Join(root, "work")
	for _, d := range []string{secrets, work, filepath.Join(root, "extra")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(secrets, "token"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A link into the secrets dir, a link to the dir itself, a dangling link to a new file
	// inside it, and a link to a harmless place.
	mustLink(t, filepath.Join(secrets, "token"), filepath.Join(work, "token-link"))
	mustLink(t, secrets, filepath.Join(work, "secrets-link"))
	mustLink(t, filepath.Join(secrets, "new-file"), filepath.Join(work, "dangling"))
	mustLink(t, "../app/secrets", filepath.Join(work, "relative-link"))
	mustLink(t, work, filepath.Join(root, "work-link"))
	if err := os.MkdirAll(filepath.Join(secrets, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	mustLink(t, filepath.Join(secrets, "d"), filepath.Join(work, "deep-link")) // deep-link/.. is secrets for the kernel

	g, err := NewFileGuard([]string{secrets, filepath.Join(root, "extra") + "/", "", filepath.Join(root, "single.key")})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		path  string
		write bool
		want  error // nil, fault.ErrForbidden or fault.ErrInvalid
	}{
		{"outside read", filepath.Join(work, "main.go"), false, nil},
		{"outside write", filepath.Join(work, "new.txt"), true, nil},
		{"sibling with common prefix", secrets + "-backup/x", false, nil},
		{"the dir itself", secrets, false, fault.ErrForbidden},
		{"inside read", filepath.Join(secrets, "token"), false, fault.ErrForbidden},
		{"inside write new", filepath.Join(secrets, "sub", "new"), true, fault.ErrForbidden},
		{"trailing slash", secrets + "/", false, fault.ErrForbidden},
		{"double slash", strings.Replace(secrets, "/app/", "/app//", 1) + "//token", false, fault.ErrForbidden},
		{"dot dot", filepath.Join(work, "..") + "/app/x/../secrets/token", false, fault.ErrForbidden},
		{"dot dot raw", work + "/../app/secrets/token", true, fault.ErrForbidden},
		{"extra dir", filepath.Join(root, "extra", "a", "b"), false, fault.ErrForbidden},
		{"single file", filepath.Join(root, "single.key"), true, fault.ErrForbidden},
		{"link to file", filepath.Join(work, "token-link"), false, fault.ErrForbidden},
		{"through dir link", filepath.Join(work, "secrets-link", "token"), false, fault.ErrForbidden},
		{"through dir link new file", filepath.Join(work, "secrets-link", "new"), true, fault.ErrForbidden},
		{"dangling link", filepath.Join(work, "dangling"), true, fault.ErrForbidden},
		{"relative link", filepath.Join(work, "relative-link", "token"), false, fault.ErrForbidden},
		{"harmless link", filepath.Join(root, "work-link", "main.go"), true, nil},
		{"dot dot after a link", work + "/deep-link/../token", false, fault.ErrForbidden},  // Clean says work/token
		{"dot dot after a link new", work + "/deep-link/../new", true, fault.ErrForbidden}, // a new file in secrets
		{"dot dot after a harmless link", root + "/work-link/../work/main.go", false, nil}, // work-link/.. is root
		{"dot dot after a link out of secrets", work + "/secrets-link/../../work/x", true, nil},
		{"write onto parent", filepath.Join(root, "app"), true, fault.ErrForbidden},
		{"read parent listing", filepath.Join(root, "app"), false, nil},
		{"relative", "app/secrets/token", false, fault.ErrInvalid},
		{"empty", "", false, fault.ErrInvalid},
		{"nul", secrets + "\x00/token", false, fault.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := g.CheckPath(tt.path, tt.write)
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("CheckPath(%q) = %v, want nil", tt.path, err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("CheckPath(%q) = %v, want %v", tt.path, err, tt.want)
			}
		})
	}
	err = g.CheckPath(filepath.Join(secrets, "token"), false)
	if msg := err.Error(); !strings.Contains(msg, "protected") || !strings.Contains(msg, secrets) {
		t.Fatalf("message %q", msg)
	}
	if got := g.Protected(); len(got) != 3 {
		t.Fatalf("Protected() = %v", got)
	}
	if _, err := NewFileGuard([]string{"relative/dir"}); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("relative protected path: %v", err)
	}
}

// A protected path that is itself reached through a link is protected under both names.
func TestFileGuardProtectedThroughLink(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real-secrets")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	mustLink(t, real, filepath.Join(root, "secrets"))
	g, err := NewFileGuard([]string{filepath.Join(root, "secrets")})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "secrets", "a"), filepath.Join(real, "a")} {
		if err := g.CheckPath(p, false); !errors.Is(err, fault.ErrForbidden) {
			t.Errorf("CheckPath(%q) = %v", p, err)
		}
	}
}

// The lexical guard, for VM paths, compares cleaned paths without touching this machine.
func TestLexicalFileGuard(t *testing.T) {
	root := t.TempDir()
	mustLink(t, "/home/user/.cubicle", filepath.Join(root, "link"))
	g, err := NewLexicalFileGuard([]string{"/home/user/.cubicle"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want error
	}{
		{"/home/user/.cubicle/keys", fault.ErrForbidden},
		{"/home/user/x/../.cubicle/", fault.ErrForbidden},
		{"/home/user/.cubicle2", nil},
		{"/home/user/project/a.txt", nil},
		{filepath.Join(root, "link", "keys"), nil}, // a host link means nothing in the VM
	}
	for _, tt := range tests {
		if err := g.CheckPath(tt.path, true); (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("CheckPath(%q) = %v, want %v", tt.path, err, tt.want)
		}
	}
}

func mustLink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
