package security

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// TestHostSandboxSettings: per-node host sandbox settings are saved (and survive a restart),
// invalid read-write paths are refused whole and change nothing, and an entry with the
// defaults removes the node's.
func TestHostSandboxSettings(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "cubicle.db"), store.Options{KeepBackups: -1})
	if err != nil {
		t.Fatal(err)
	}
	s := newService(t, st, dir)
	if h := s.HostSandbox("local"); h.AllowNone || h.NetworkOff || len(h.ReadWrite) != 0 {
		t.Fatalf("defaults: %+v", h)
	}
	set := map[string]store.HostSandbox{"local": {NetworkOff: true, ReadWrite: []string{"/srv/builds/", "/srv/builds"}}, "r1": {AllowNone: true}}
	v, err := s.Update("admin", Update{HostSandbox: &set})
	if err != nil {
		t.Fatal(err)
	}
	if h := v.HostSandbox["local"]; !h.NetworkOff || !slices.Equal(h.ReadWrite, []string{"/srv/builds"}) || !v.HostSandbox["r1"].AllowNone {
		t.Fatalf("saved: %+v", v.HostSandbox)
	}
	for _, bad := range []map[string]store.HostSandbox{
		{"local": {ReadWrite: []string{"relative/dir"}}},
		{"local": {ReadWrite: []string{"/"}}},
		{" ": {AllowNone: true}},
	} {
		if _, err := s.Update("admin", Update{HostSandbox: &bad}); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if !s.HostSandbox("local").NetworkOff {
		t.Fatal("a refused update changed the settings")
	}
	st.Close()
	st, err = store.Open(filepath.Join(dir, "cubicle.db"), store.Options{KeepBackups: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s = newService(t, st, dir)
	if !s.HostSandbox("r1").AllowNone || !s.HostSandbox("local").NetworkOff {
		t.Fatalf("after a restart: %+v", s.View().HostSandbox)
	}
	reset := map[string]store.HostSandbox{"r1": {}}
	v, err = s.Update("admin", Update{HostSandbox: &reset})
	if err != nil || strings.Contains(strings.Join(keys(v.HostSandbox), ","), "r1") {
		t.Fatalf("reset: %+v %v", v.HostSandbox, err)
	}
}

func keys(m map[string]store.HostSandbox) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
