package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fresh data directory has no image work directory yet: builds must create it.
func TestScratchCreatesWorkDir(t *testing.T) {
	b := &Builder{cfg: Config{WorkDir: filepath.Join(t.TempDir(), "data", "images")}}
	dir, err := b.scratch("cubicle-build-")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() || !strings.HasPrefix(dir, b.cfg.WorkDir) {
		t.Fatalf("scratch dir %s: %v", dir, err)
	}
}
