package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/recording"
	"cubicle/backend/screen"
	"cubicle/backend/store"
	"cubicle/internal/testenv"
	"cubicle/runner/wire"
)

// newLocalRecordings is the server's own recordings in a temporary directory (none yet).
func newLocalRecordings(t *testing.T) recording.Local {
	t.Helper()
	s, err := recording.New(recording.Config{Dir: t.TempDir(), Screens: screen.New(screen.Config{}),
		Logger: testenv.Logger(t, slog.LevelInfo),
		Link: func(context.Context, string) (screen.RegionSource, error) {
			return nil, fault.Unavailable("this test has no desktops")
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return recording.Local{Service: s}
}

// TestRecordingsOfRunners: the recordings of an agent on a runner that records its own
// desktops are read from that runner, and while it cannot be reached every question about
// them is unavailable, saying where they are kept; an agent on the server or on a runner
// the server records has the server's recordings only.
func TestRecordingsOfRunners(t *testing.T) {
	tf := newTestFleet(t)
	tf.account(t, "acc", store.RoleAdmin)
	records := tf.runner(t, "records", false)
	older := tf.runner(t, "older", false)
	hello, _ := json.Marshal(wire.Hello{Protocol: 1, Capabilities: []string{wire.CapRecording}})
	if _, err := tf.st.UpdateRunner(records, func(r *store.Runner) error { r.Hello = hello; return nil }); err != nil {
		t.Fatal(err)
	}
	tf.agent(t, store.Agent{ID: "ag-local", AccountID: "acc", Name: "Ada"})
	tf.agent(t, store.Agent{ID: "ag-records", AccountID: "acc", Name: "Bea", NodeID: records})
	tf.agent(t, store.Agent{ID: "ag-older", AccountID: "acc", Name: "Cy", NodeID: older})
	rr := tf.Recordings(newLocalRecordings(t))
	ctx := t.Context()

	// The server's recordings only: none here, and a missing one is not found.
	for _, agentID := range []string{"ag-local", "ag-older", "ag-unknown"} {
		if l, err := rr.List(ctx, "acc", agentID); err != nil || len(l) != 0 {
			t.Errorf("List(%s) = %+v, %v; want the server's (none)", agentID, l, err)
		}
		if _, err := rr.Get(ctx, "acc", agentID, "rec-x"); !errors.Is(err, fault.ErrNotFound) {
			t.Errorf("Get(%s): %v; want not found", agentID, err)
		}
		if _, err := rr.Lookup(ctx, agentID, "rec-x"); !errors.Is(err, fault.ErrNotFound) {
			t.Errorf("Lookup(%s): %v; want not found", agentID, err)
		}
	}

	// The runner's recordings, which cannot be read while it is away.
	const kept = "kept on its runner, which cannot be reached now"
	on := recording.Info{ID: "rec-1", Runner: records, AgentIDs: []string{"ag-records"}}
	unavailable := map[string]error{}
	_, unavailable["List"] = rr.List(ctx, "acc", "ag-records")
	_, unavailable["Get"] = rr.Get(ctx, "acc", "ag-records", "rec-1")
	_, unavailable["Lookup"] = rr.Lookup(ctx, "ag-records", "rec-1")
	unavailable["Delete"] = rr.Delete(ctx, on)
	_, _, unavailable["Screenshot"] = rr.Screenshot(ctx, on, 1)
	for name, err := range unavailable {
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), kept) || !strings.Contains(err.Error(), records) {
			t.Errorf("%s of a recording on an offline runner: %v; want unavailable saying %q and naming the runner", name, err, kept)
		}
	}
	ctrl := make(chan recording.Control)
	if err := rr.Play(ctx, on, 0, 1, ctrl, nil); !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), kept) {
		t.Errorf("Play of a recording on an offline runner: %v", err)
	}
	// A recording said to be on a runner that is not there is not found.
	gone := recording.Info{ID: "rec-2", Runner: "r-gone"}
	if err := rr.Delete(ctx, gone); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("Delete on an unknown runner: %v; want not found", err)
	}
}

// TestWhoRecords: the server records its own desktops and those of a runner not connected
// with CapRecording; the marks and settings it would send to an unknown runner fail.
func TestWhoRecords(t *testing.T) {
	tf := newTestFleet(t)
	box := tf.runner(t, "box", false)
	for _, node := range []string{"", "local", box, "r-unknown"} {
		if !tf.RecordsHere(node) {
			t.Errorf("RecordsHere(%q) = false; the server records it", node)
		}
	}
	if err := tf.ForwardMark(t.Context(), "r-unknown", nodeapi.RecordingMark{}); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("ForwardMark to an unknown runner: %v", err)
	}
	if err := tf.PushRecordingSettings(t.Context(), box, nodeapi.RecordingSettings{}); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("PushRecordingSettings to a runner not connected: %v", err)
	}
}
