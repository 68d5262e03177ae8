//go:build linux

package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkShell: `/bin/sh -c true` plain, in bubblewrap and under Landlock, with a node's
// policy (the sandbox's cost per host_shell call; issue 26 allows 30 ms p50).
func BenchmarkShell(b *testing.B) {
	work := b.TempDir()
	data := filepath.Join(work, "data")
	os.MkdirAll(data, 0o700)
	home, _ := os.UserHomeDir()
	p := Policy{WorkDir: work, Hidden: append([]string{data}, HomeSecrets(home)...), Network: true}
	argv := []string{"/bin/sh", "-c", "true"}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command(argv[0], argv[1:]...).Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, k := range []Kind{Bwrap, Landlock} {
		s, err := New(k)
		if err != nil {
			b.Logf("%s: %v", k, err)
			continue
		}
		b.Run(string(k), func(b *testing.B) {
			for b.Loop() {
				c, err := s.Wrap(context.Background(), p, argv)
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
				cmd.Env = append(os.Environ(), c.Env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				c.Cleanup()
			}
		})
	}
}
