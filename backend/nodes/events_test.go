package nodes

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/store"
)

// recorder is a Publisher that keeps what it was given.
type recorder struct {
	mu  sync.Mutex
	evs []recorded
}

type recorded struct {
	typ  events.Type
	aud  events.Audience
	data any
}

func (r *recorder) Publish(t events.Type, aud events.Audience, data any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, recorded{t, aud, data})
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.evs...)
}

func newTestHub(t *testing.T) (*Hub, *store.Store, *recorder) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	h, err := New(Config{Store: st, Events: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		st.Close()
	})
	return h, st, rec
}

// TestDesktopAudience: a runner's word about whose desktop it is counts only as far as the
// server's records agree; otherwise only administrators see the event.
func TestDesktopAudience(t *testing.T) {
	h, st, _ := newTestHub(t)
	now := time.Now()
	for _, a := range []store.Agent{
		{ID: "a-here", AccountID: "mia", Name: "Ada", NodeID: "r-1", CreatedAt: now},
		{ID: "a-local", AccountID: "mia", Name: "Bo", CreatedAt: now},
		{ID: "a-olaf", AccountID: "olaf", Name: "Otto", NodeID: "r-2", CreatedAt: now},
	} {
		if err := st.CreateAgent(a); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		d    desk
		want events.Audience
	}{
		{"own agent placed here", desk{AccountID: "mia", AgentID: "a-here"}, events.ForAccount("mia", true)},
		{"agent of another account", desk{AccountID: "olaf", AgentID: "a-here"}, events.AdminsOnly},
		{"agent placed elsewhere", desk{AccountID: "mia", AgentID: "a-local"}, events.AdminsOnly},
		{"unknown agent", desk{AccountID: "mia", AgentID: "a-nope"}, events.AdminsOnly},
		{"shared desktop of an account with an agent here", desk{AccountID: "mia", Scope: "shared"}, events.ForAccount("mia", true)},
		{"shared desktop of an account with nothing here", desk{AccountID: "olaf", Scope: "shared"}, events.AdminsOnly},
		{"no account", desk{Scope: "compose"}, events.AdminsOnly},
	} {
		if got := h.audience("r-1", tc.d); got != tc.want {
			t.Errorf("%s: audience %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestUnreachableAndReconcileBookkeeping: when a link ends every desktop known on the node is
// published unreachable (once, with its previous state), the others' are untouched, and the
// runner's status says disconnected with its last-known capacity.
func TestUnreachableBookkeeping(t *testing.T) {
	h, st, rec := newTestHub(t)
	if err := st.CreateRunner(store.Runner{ID: "r-1", Name: "box", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.max["r-1"] = 2
	h.mu.Unlock()
	h.desktopEvent("r-1", desk{InstanceID: "vm-1", State: "running"})
	h.desktopEvent("r-1", desk{InstanceID: "vm-2", State: "stopped"})
	h.desktopEvent("r-2", desk{InstanceID: "vm-9", State: "running"})
	h.desktopEvent("r-1", desk{InstanceID: "vm-3", State: "running"})
	h.desktopEvent("r-1", desk{InstanceID: "vm-3", Removed: true})
	before := len(rec.all())
	h.unreachable("r-1")
	h.unreachable("r-1") // a second end changes nothing about the states
	got := map[string][]events.Desktop{}
	var runner []events.Runner
	for _, e := range rec.all()[before:] {
		switch d := e.data.(type) {
		case events.Desktop:
			got[d.InstanceID] = append(got[d.InstanceID], d)
		case events.Runner:
			runner = append(runner, d)
		}
	}
	if len(got) != 2 || len(got["vm-9"]) != 0 || len(got["vm-3"]) != 0 {
		t.Fatalf("unreachable desktops: %+v", got)
	}
	if d := got["vm-1"][0]; d.State != events.DesktopUnreachable || d.Previous != "running" || d.NodeID != "r-1" || d.LastError == "" {
		t.Fatalf("vm-1: %+v", d)
	}
	if d := got["vm-2"][1]; d.State != events.DesktopUnreachable || d.Previous != "stopped" {
		t.Fatalf("vm-2 after the second end keeps its previous state: %+v", d)
	}
	if len(runner) != 2 || runner[0].State != events.RunnerDisconnected || runner[0].Name != "box" || runner[0].Desktops == nil ||
		runner[0].Desktops.Running != 0 || runner[0].Desktops.Max != 2 {
		t.Fatalf("runner status: %+v", runner)
	}
	// A revoked runner's end says revoked.
	if _, err := st.UpdateRunner("r-1", func(r *store.Runner) error { r.Revoked = true; return nil }); err != nil {
		t.Fatal(err)
	}
	h.unreachable("r-1")
	last := rec.all()[len(rec.all())-1].data.(events.Runner)
	if last.State != events.RunnerRevoked {
		t.Fatalf("revoked runner's end: %+v", last)
	}
}
