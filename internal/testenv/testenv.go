// Package testenv is the tests' one harness: whether a missing resource skips or fails a test
// (Missing and the checks built on it; CI sets CUBICLE_REQUIRE_ALL=1 so that no skip passes
// there), loggers writing to the test's own output, and TempDir for tests that also run on
// Windows (under Wine in CI). Its code is portable: the Windows tests link it too.
package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TempDir is t.TempDir for tests that also run under Wine. Go removes a directory tree on
// Windows with FILE_DISPOSITION_INFORMATION_EX (POSIX delete semantics, Windows 10 1607+),
// which Wine 8 lacks, so t.TempDir's cleanup fails there ("Invalid function") and fails the
// test. This cleanup falls back to removing one entry at a time, children first, with
// os.Remove (DeleteFile and RemoveDirectory). A directory that still cannot be removed is
// reported as a test error, as t.TempDir does.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cubicle-test-")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	t.Cleanup(func() {
		if os.RemoveAll(dir) == nil {
			return
		}
		if err := removeTree(dir); err != nil {
			t.Errorf("TempDir cleanup: %v", err)
		}
	})
	return dir
}

// removeTree removes dir and everything below it, deepest entries first.
func removeTree(dir string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Reverse(paths) // WalkDir visits a directory before its entries
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
