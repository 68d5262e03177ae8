package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestEvict: binaries unused for three days go; then the least recently used while the cache
// is over its bound, but never one used within the hour (the run that just linked).
func TestEvict(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	files := []struct {
		name string
		size int
		age  time.Duration
	}{
		{"a-old.test", 10, 80 * time.Hour},   // past three days: always removed
		{"b-5h.test", 100, 5 * time.Hour},    // oldest within three days: removed first for space
		{"c-3h.test", 100, 3 * time.Hour},    // next: removed when still over
		{"d-2h.test", 100, 2 * time.Hour},    // kept once under the bound
		{"e-now.test", 100, time.Minute},     // just used: never removed for space
		{"f-now.test", 100, 2 * time.Minute}, // just used
		{"notes.txt", 1000, 90 * time.Hour},  // not a binary: left alone
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, make([]byte, f.size), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-f.age), now.Add(-f.age)); err != nil {
			t.Fatal(err)
		}
	}
	left := func() []string {
		ents, _ := os.ReadDir(dir)
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	evict(dir, 1000)
	if got, want := left(), []string{"b-5h.test", "c-3h.test", "d-2h.test", "e-now.test", "f-now.test", "notes.txt"}; !slices.Equal(got, want) {
		t.Fatalf("under the bound: left %v, want %v", got, want)
	}
	evict(dir, 300)
	if got, want := left(), []string{"d-2h.test", "e-now.test", "f-now.test", "notes.txt"}; !slices.Equal(got, want) {
		t.Fatalf("over the bound: left %v, want %v", got, want)
	}
	evict(dir, 1)
	if got, want := left(), []string{"e-now.test", "f-now.test", "notes.txt"}; !slices.Equal(got, want) {
		t.Fatalf("a bound below the newest: left %v, want %v", got, want)
	}
}
