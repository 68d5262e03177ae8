//go:build linux

package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinuxOnly checks that every file of the driver carries the linux build constraint:
// one without it breaks `go build ./...` and `go vet ./...` on macOS and Windows (CI runs
// both), because it alone would make up the package there.
func TestLinuxOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files found: %v", err)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		first := ""
		if sc.Scan() {
			first = strings.TrimSpace(sc.Text())
		}
		fh.Close()
		if first != "//go:build linux" {
			t.Errorf("%s: first line %q; the driver is Linux-only, start the file with //go:build linux", f, first)
		}
	}
}
