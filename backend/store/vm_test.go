package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"cubicle/backend/fault"
)

// TestMigrateVMBuckets opens a schema v2 file: it gains the Local VM buckets (version 3, then
// any later migration) and its VM records work.
func TestMigrateVMBuckets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cubicle.db")
	writeRaw(t, path, map[string]map[string]string{
		"meta":              {"version": "2"},
		"accounts":          {},
		"account_usernames": {},
		"agents":            {},
		"node_settings":     {},
	})
	s, err := Open(path, testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.SchemaVersion(); v != len(migrations)+1 {
		t.Fatalf("version %d, want %d", v, len(migrations)+1)
	}
	if got := readRaw(t, path+".bak-v2", "meta", "version"); got != "2" {
		t.Errorf("backup version %q", got)
	}
	testVMRecords(t, s)
}

func TestVMRecords(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "cubicle.db"), testOpts(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testVMRecords(t, s)
}

func testVMRecords(t *testing.T, s *Store) {
	t.Helper()
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.VMImage("local", "standard"); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("missing image: %v", err)
	}
	if err := s.PutVMImage(VMImage{Key: "standard"}); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("image without node: %v", err)
	}
	img := VMImage{NodeID: "local", Key: "standard", Ref: "r", ImageID: "i", RecipeHash: "h", DriverVersion: "d", PreparedAt: at}
	if err := s.PutVMImage(img); err != nil {
		t.Fatal(err)
	}
	s.PutVMImage(VMImage{NodeID: "other", Key: "standard"})
	got, err := s.VMImage("local", "standard")
	img.ID = "local/standard"
	if err != nil || got != img {
		t.Errorf("image %+v, %v; want %+v", got, err, img)
	}
	if imgs, _ := s.VMImages("local"); len(imgs) != 1 {
		t.Errorf("images of local: %+v", imgs)
	}

	in := VMInstance{ID: "vm-1", NodeID: "local", AccountID: "a", Scope: "agent", AgentID: "g", State: "running", CreatedAt: at}
	if err := s.PutVMInstance(in); err != nil {
		t.Fatal(err)
	}
	s.PutVMInstance(VMInstance{ID: "vm-0", NodeID: "local", CreatedAt: at.Add(-time.Hour)})
	s.PutVMInstance(VMInstance{ID: "vm-x", NodeID: "other", CreatedAt: at})
	if err := s.PutVMInstance(VMInstance{ID: "vm-2"}); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("instance without node: %v", err)
	}
	list, err := s.VMInstances("local")
	if err != nil || len(list) != 2 || list[0].ID != "vm-0" {
		t.Errorf("instances %+v, %v; want vm-0, vm-1", list, err)
	}
	up, err := s.UpdateVMInstance("vm-1", func(i *VMInstance) error { i.State = "stopped"; return nil })
	if err != nil || up.State != "stopped" {
		t.Errorf("update %+v, %v", up, err)
	}
	if _, err := s.UpdateVMInstance("vm-1", func(i *VMInstance) error { i.ID = "zz"; return nil }); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("id change: %v", err)
	}
	if err := s.DeleteVMInstance("vm-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.VMInstance("vm-1"); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("deleted instance: %v", err)
	}
	if err := s.PutVMBinding(VMBinding{AgentID: "g", Desktop: "compose-desk-1"}); err != nil {
		t.Fatal(err)
	}
	if b, err := s.VMBinding("g"); err != nil || b.Desktop != "compose-desk-1" {
		t.Errorf("binding %+v, %v", b, err)
	}
}
