package cli

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusedNetworkStartCreatesNothing: a first start on a network address without a chosen
// strong admin password is refused before anything is written — no data directory, no
// database, no session key (README: "the start is refused and nothing is created").
func TestRefusedNetworkStartCreatesNothing(t *testing.T) {
	for _, c := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"no password", nil, "CUBICLE_ADMIN_PASSWORD"},
		{"weak password", map[string]string{"CUBICLE_ADMIN_PASSWORD": "password1"}, "not strong enough"},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			missing := filepath.Join(parent, "data")
			e, _, errb := testEnv(c.vars)
			if code := run(context.Background(), e, []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", missing}); code != 5 || !strings.Contains(errb.String(), c.want) {
				t.Fatalf("exit %d, stderr %q", code, errb)
			}
			if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the refused start created its data directory (%v)", err)
			}
			// An existing, empty directory stays empty.
			empty := filepath.Join(parent, "empty")
			if err := os.Mkdir(empty, 0o700); err != nil {
				t.Fatal(err)
			}
			e, _, errb = testEnv(c.vars)
			if code := run(context.Background(), e, []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", empty}); code != 5 {
				t.Fatalf("exit %d, stderr %q", code, errb)
			}
			if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
				t.Fatalf("the refused start wrote into the data directory: %v %v", ents, err)
			}
		})
	}
}
