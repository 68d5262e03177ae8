package store

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "cubicle.db")
	s, err := Open(path, testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := s.Identity()
	if len(id.ID) != 16 || id.Namespace != "" || id.CopiedFrom != "" {
		t.Fatalf("a new file's identity: %+v", id)
	}
	if err := s.PutVMInstance(VMInstance{ID: "vm-1", NodeID: "local", Scope: "agent", State: "running", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutVMInstance(VMInstance{ID: "compose-x", NodeID: "local", Scope: "compose", State: "running", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Backup()
	if err != nil {
		t.Fatal(err)
	}

	// A copy opened while the original is open: its own id and namespace, the dynamic
	// desktop records dropped, the fixed one kept.
	copyPath := filepath.Join(dir, "b", "cubicle.db")
	os.MkdirAll(filepath.Dir(copyPath), 0o700)
	if err := copyFile(snap.Path, copyPath, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Open(copyPath, testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	cid := c.Identity()
	if cid.ID == id.ID || cid.Namespace != cid.ID || cid.CopiedFrom != canonical(path) {
		t.Errorf("a copy's identity %+v (original %+v)", cid, id)
	}
	if _, err := c.VMInstance("vm-1"); err == nil {
		t.Error("the copy kept the original's desktop record")
	}
	if _, err := c.VMInstance("compose-x"); err != nil {
		t.Errorf("the copy lost the fixed desktop's record: %v", err)
	}
	c.Close()
	if c, err = Open(copyPath, testOpts(t, nil)); err != nil || c.Identity() != (Identity{ID: cid.ID, Namespace: cid.Namespace}) {
		t.Errorf("the copy reopened: %+v, %v", c.Identity(), err)
	}
	c.Close()

	// The original keeps its identity and records.
	s.Close()
	if s, err = Open(path, testOpts(t, nil)); err != nil || s.Identity() != id {
		t.Fatalf("the original reopened: %+v, %v", s.Identity(), err)
	}
	if _, err := s.VMInstance("vm-1"); err != nil {
		t.Errorf("the original lost its record: %v", err)
	}
	s.Close()

	// A copy of a closed original is a copy too (the original is still there with its id).
	copy2 := filepath.Join(dir, "c", "cubicle.db")
	os.MkdirAll(filepath.Dir(copy2), 0o700)
	copyFile(path, copy2, 0o600)
	if c, err = Open(copy2, testOpts(t, nil)); err != nil || c.Identity().ID == id.ID {
		t.Errorf("a copy of a closed original: %+v, %v", c.Identity(), err)
	}
	c.Close()

	// A move keeps the identity and the records.
	moved := filepath.Join(dir, "d", "cubicle.db")
	os.MkdirAll(filepath.Dir(moved), 0o700)
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	m, err := Open(moved, testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if m.Identity() != id {
		t.Errorf("a moved file's identity %+v, want %+v", m.Identity(), id)
	}
	if _, err := m.VMInstance("vm-1"); err != nil {
		t.Errorf("the moved file lost its record: %v", err)
	}
	// The same file through a symbolic link to its directory is the same file.
	link := filepath.Join(dir, "e")
	if err := os.Symlink(filepath.Dir(moved), link); err != nil {
		t.Fatal(err)
	}
	m.Close()
	m, err = Open(filepath.Join(link, "cubicle.db"), testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Identity() != id {
		t.Errorf("through a symlink: %+v, want %+v", m.Identity(), id)
	}
}
