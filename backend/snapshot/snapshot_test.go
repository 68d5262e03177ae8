package snapshot

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/internal/testenv"
)

func testStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Config{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pseudo returns n bytes of compressible-looking but varied content.
func pseudo(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	r.Read(b)
	return b
}

// makeTree builds a tree with files, an empty directory, symlinks, odd modes.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	r := rand.New(rand.NewSource(1))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "src", "pkg"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "empty", "deeper"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "src", "main.go"), []byte("package main\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "src", "pkg", "big.bin"), pseudo(r, 3<<20), 0o600))
	must(os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "empty.txt"), nil, 0o640))
	must(os.Symlink("src/main.go", filepath.Join(dir, "link")))
	must(os.Symlink("/nowhere/at/all", filepath.Join(dir, "dangling")))
	must(os.Mkdir(filepath.Join(dir, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "ro", "f"), []byte("read only dir"), 0o444))
	must(os.Chmod(filepath.Join(dir, "ro"), 0o555))
	if runtime.GOOS != "windows" {
		must(os.Chmod(filepath.Join(dir, "run.sh"), 0o755|fs.ModeSetgid))
	}
}

func TestSnapshotRestoreByteIdentical(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	ws := filepath.Join(t.TempDir(), "ws")
	makeTree(t, ws)
	before, err := TreeSHA256(ctx, ws, 0)
	if err != nil {
		t.Fatal(err)
	}
	sn, taken, err := s.Take(ctx, "agent1", ws, Options{Name: "first"})
	if err != nil || !taken {
		t.Fatalf("take: %v %v", taken, err)
	}
	if sn.TreeSHA256 != before {
		t.Fatalf("snapshot tree %s, tree %s", sn.TreeSHA256, before)
	}
	if sn.Files != 5 || sn.Dirs != 6 || sn.Symlinks != 2 {
		t.Fatalf("counts: %+v", sn)
	}
	// Wreck the workspace: delete, edit, add, change a mode, replace a symlink.
	os.RemoveAll(filepath.Join(ws, "src"))
	os.RemoveAll(filepath.Join(ws, "empty"))
	os.WriteFile(filepath.Join(ws, "new.txt"), []byte("added"), 0o644)
	os.WriteFile(filepath.Join(ws, "empty.txt"), []byte("now not empty"), 0o640)
	os.Chmod(filepath.Join(ws, "run.sh"), 0o600)
	os.Remove(filepath.Join(ws, "link"))
	os.Symlink("elsewhere", filepath.Join(ws, "link"))
	if h, _ := TreeSHA256(ctx, ws, 0); h == before {
		t.Fatal("the wrecked tree hashes like the original")
	}
	d, err := s.Diff(ctx, "agent1", sn.ID, ws, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(d.Added, "src/pkg/big.bin") || !slices.Contains(d.Added, "empty/deeper") ||
		!slices.Equal(d.Removed, []string{"new.txt"}) || !slices.Contains(d.Changed, "empty.txt") ||
		!slices.Contains(d.Changed, "run.sh") || !slices.Contains(d.Changed, "link") || d.ChangedCount != 3 {
		t.Fatalf("diff: %+v", d)
	}
	if err := s.Replace(ctx, "agent1", sn.ID, ws, 0); err != nil {
		t.Fatal(err)
	}
	after, err := TreeSHA256(ctx, ws, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("restored tree %s, original %s", after, before)
	}
	if st, err := os.Lstat(filepath.Join(ws, "run.sh")); err != nil || (runtime.GOOS != "windows" && st.Mode()&fs.ModeSetgid == 0) {
		t.Fatalf("run.sh mode after restore: %v %v", st.Mode(), err)
	}
	if tgt, err := os.Readlink(filepath.Join(ws, "dangling")); err != nil || tgt != "/nowhere/at/all" {
		t.Fatalf("dangling symlink: %q %v", tgt, err)
	}
	if ents, err := os.ReadDir(filepath.Join(ws, "empty", "deeper")); err != nil || len(ents) != 0 {
		t.Fatalf("empty dir: %v %v", ents, err)
	}
	if matches, _ := filepath.Glob(ws + stagingMark + "*"); len(matches) != 0 {
		t.Fatalf("staging left: %v", matches)
	}
	d, err = s.Diff(ctx, "agent1", sn.ID, ws, 0)
	if err != nil || d.AddedCount+d.RemovedCount+d.ChangedCount != 0 {
		t.Fatalf("diff after restore: %+v %v", d, err)
	}
	// A fork's restore into a new directory gives the same tree.
	fork := filepath.Join(t.TempDir(), "fork")
	if err := s.RestoreTo(ctx, "agent1", sn.ID, fork, 0); err != nil {
		t.Fatal(err)
	}
	if h, _ := TreeSHA256(ctx, fork, 0); h != before {
		t.Fatalf("fork tree %s, original %s", h, before)
	}
	if err := s.RestoreTo(ctx, "agent1", sn.ID, fork, 0); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("restore into a full dir: %v", err)
	}
}

func TestDedupAndUnchangedFilesNotRead(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	ws := t.TempDir()
	r := rand.New(rand.NewSource(2))
	for i := range 8 {
		if err := os.WriteFile(filepath.Join(ws, "f"+string(rune('a'+i))), pseudo(r, 2<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	first, _, err := s.Take(ctx, "a", ws, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Change 64 KiB in the middle of one file.
	p := filepath.Join(ws, "fc")
	b, _ := os.ReadFile(p)
	copy(b[1<<20:], pseudo(r, 64<<10))
	os.WriteFile(p, b, 0o644)
	// A copy of a file under another name is stored once.
	orig, _ := os.ReadFile(filepath.Join(ws, "fa"))
	os.WriteFile(filepath.Join(ws, "copy-of-fa"), orig, 0o644)
	second, _, err := s.Take(ctx, "a", ws, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if second.ReadBytes != 4<<20 {
		t.Fatalf("read %d bytes, want the two changed files' 4 MiB", second.ReadBytes)
	}
	if second.NewBytes > first.NewBytes/8 {
		t.Fatalf("second snapshot added %d bytes, first %d: no dedup", second.NewBytes, first.NewBytes)
	}
	t.Logf("first %d new bytes (%d chunks), second %d (%d chunks): dedup ratio %.1f%%", first.NewBytes, first.NewChunks,
		second.NewBytes, second.NewChunks, 100*float64(second.NewBytes)/float64(first.NewBytes))
	// Nothing changed: SkipUnchanged takes none.
	third, taken, err := s.Take(ctx, "a", ws, Options{SkipUnchanged: true})
	if err != nil || taken || third.ID != second.ID {
		t.Fatalf("unchanged tree: taken %v id %s (newest %s) %v", taken, third.ID, second.ID, err)
	}
}

func TestCorruptChunkDetected(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	ws := t.TempDir()
	r := rand.New(rand.NewSource(3))
	os.WriteFile(filepath.Join(ws, "data"), pseudo(r, 1<<20), 0o644)
	os.WriteFile(filepath.Join(ws, "keep"), []byte("unchanged"), 0o644)
	sn, _, err := s.Take(ctx, "a", ws, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Manifest("a", sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, e := range m.Entries {
		if e.Path == "data" {
			id = e.Chunks[len(e.Chunks)/2]
		}
	}
	// Flip one byte of a chunk: recompress altered plaintext so zstd itself decodes fine and
	// only the hash can tell.
	plain, err := s.readChunk(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain = bytes.Clone(plain)
	plain[100] ^= 0xff
	if err := os.WriteFile(s.chunkPath(id), s.enc.EncodeAll(plain, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "keep"), []byte("changed after the snapshot"), 0o644)
	before, _ := TreeSHA256(ctx, ws, 0)
	err = s.Replace(ctx, "a", sn.ID, ws, 0)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("restore of a corrupt chunk: %v", err)
	}
	t.Logf("reported: %v", err)
	if after, _ := TreeSHA256(ctx, ws, 0); after != before {
		t.Fatal("a failed restore changed the workspace")
	}
	if err := s.Verify(ctx, "a", sn.ID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify: %v", err)
	}
	// A chunk that is not zstd at all, or missing, is reported too.
	os.WriteFile(s.chunkPath(id), []byte("garbage"), 0o600)
	if err := s.Verify(ctx, "a", sn.ID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify garbage: %v", err)
	}
	os.Remove(s.chunkPath(id))
	if err := s.RestoreTo(ctx, "a", sn.ID, filepath.Join(t.TempDir(), "x"), 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("restore of a missing chunk: %v", err)
	}
}

func TestRetentionAndGC(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, err := Open(Config{Dir: t.TempDir(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ws := t.TempDir()
	r := rand.New(rand.NewSource(4))
	if _, err := s.SetPolicy(ctx, "a", Policy{KeepCount: 3}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 5 {
		os.WriteFile(filepath.Join(ws, "f"), pseudo(r, 256<<10), 0o644) // each snapshot: new content
		sn, _, err := s.Take(ctx, "a", ws, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sn.ID)
		now = now.Add(time.Hour * time.Duration(24*(i+1)))
	}
	list, _ := s.List("a")
	if len(list) != 3 || list[0].ID != ids[4] || list[2].ID != ids[2] {
		t.Fatalf("kept %v, want the newest three of %v", list, ids)
	}
	// The dropped snapshots' chunks were collected: only the kept ones' remain.
	usage, _ := s.DiskUsage()
	var kept int64
	for _, sn := range list {
		kept += sn.NewBytes
	}
	if usage != kept {
		t.Fatalf("store holds %d bytes, the kept snapshots added %d", usage, kept)
	}
	// Age: now is day 15; snapshots of days 3, 6 and 10 are kept; 10 days drops day 3.
	if n, err := s.SetPolicy(ctx, "a", Policy{MaxAgeDay: 10}); err != nil || n != 1 {
		t.Fatalf("age policy removed %d: %v", n, err)
	}
	// Bytes: one snapshot's worth keeps only the newest.
	if n, err := s.SetPolicy(ctx, "a", Policy{MaxBytes: 1}); err != nil || n != 1 {
		t.Fatalf("bytes policy removed %d: %v", n, err)
	}
	list, _ = s.List("a")
	if len(list) != 1 || list[0].ID != ids[4] {
		t.Fatalf("after bytes policy: %v", list)
	}
	// Another owner's chunks survive this owner's deletion.
	ws2 := t.TempDir()
	os.WriteFile(filepath.Join(ws2, "g"), pseudo(r, 300<<10), 0o644)
	other, _, err := s.Take(ctx, "b", ws2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOwner("a"); err != nil {
		t.Fatal(err)
	}
	st, err := s.GC(ctx)
	if err != nil || st.Removed == 0 {
		t.Fatalf("gc: %+v %v", st, err)
	}
	if err := s.Verify(ctx, "b", other.ID); err != nil {
		t.Fatalf("other owner's snapshot after gc: %v", err)
	}
	if err := s.Delete("b", other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("b", other.ID); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("deleted snapshot: %v", err)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if usage, _ := s.DiskUsage(); usage != 0 {
		t.Fatalf("empty store holds %d bytes", usage)
	}
}

func TestBadIDsAndStaleStaging(t *testing.T) {
	s := testStore(t)
	for _, id := range []string{"../x", "", "a/b", ".."} {
		if _, err := s.List(id); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("owner %q: %v", id, err)
		}
		if _, err := s.Get("a", id); !errors.Is(err, fault.ErrNotFound) {
			t.Errorf("snapshot %q: %v", id, err)
		}
	}
	if err := ValidName("bad\x00name"); !errors.Is(err, fault.ErrInvalid) {
		t.Error("control character accepted")
	}
	// A restore killed before its swap leaves a staging dir; the next operation removes it and
	// the workspace never shows it.
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "f"), []byte("x"), 0o644)
	os.MkdirAll(ws+stagingMark+"killed/half", 0o755)
	if _, _, err := s.Take(context.Background(), "a", ws, Options{}); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(ws + stagingMark + "*"); len(m) != 0 {
		t.Fatalf("stale staging kept: %v", m)
	}
}

func TestIDBaseAndCopy(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("owners are not given on Windows")
	}
	testenv.Root(t, "giving files to other owners")
	s := testStore(t)
	ctx := context.Background()
	const base = 1 << 20 // a desktop's user namespace: container uid 1000 is host uid base+1000
	ws := t.TempDir()
	p := filepath.Join(ws, "f")
	os.WriteFile(p, []byte("owned"), 0o640)
	os.Lchown(p, base+1000, base+1000)
	sn, _, err := s.Take(ctx, "a", ws, Options{IDBase: base})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Manifest("a", sn.ID)
	if e := m.Entries[1]; e.UID != 1000 || e.GID != 1000 {
		t.Fatalf("owner recorded as %d:%d, want 1000:1000 (relative to the namespace)", e.UID, e.GID)
	}
	cp, err := s.Copy("a", sn.ID, "b", KindFork, "")
	if err != nil || cp.TreeSHA256 != sn.TreeSHA256 || cp.Owner != "b" {
		t.Fatalf("copy: %+v %v", cp, err)
	}
	// Into another namespace (another desktop): the same tree relative to its base.
	other := filepath.Join(t.TempDir(), "other")
	if err := s.RestoreTo(ctx, "b", cp.ID, other, 2*base); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Lstat(filepath.Join(other, "f"))
	if uid, _, _, _ := owner(st); uid != 2*base+1000 {
		t.Fatalf("restored owner %d, want %d", uid, 2*base+1000)
	}
	if h, _ := TreeSHA256(ctx, other, 2*base); h != sn.TreeSHA256 {
		t.Fatal("the tree in the other namespace differs")
	}
}
