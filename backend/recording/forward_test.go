package recording

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/screen"
)

// TestMarkersOfARunnersDesktopAreForwarded: a desktop of a node that records its own
// (Config.Here false) is not recorded here; the markers made here for it (a tool call with
// the agent's screenshot, a turn) go to Forward in order, with the times relative to sending;
// the settings go to Push when the node connects and when they change.
func TestMarkersOfARunnersDesktopAreForwarded(t *testing.T) {
	marks := make(chan nodeapi.RecordingMark, 8)
	pushed := make(chan nodeapi.RecordingSettings, 8)
	s, err := New(Config{Dir: t.TempDir(), Screens: screen.New(screen.Config{}), Logger: testLogger(t),
		Link:    func(context.Context, string) (screen.RegionSource, error) { return nil, fault.Unavailable("none") },
		Here:    func(node string) bool { return node != "r1" },
		Remotes: func() []string { return []string{"r1"} },
		Forward: func(_ context.Context, node string, m nodeapi.RecordingMark) error {
			if node != "r1" {
				t.Errorf("a marker went to node %q", node)
			}
			marks <- m
			return nil
		},
		Push: func(_ context.Context, node string, st nodeapi.RecordingSettings) error {
			pushed <- st
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Start(context.Background())
	s.desktopEvent(events.Desktop{InstanceID: "d1", NodeID: "r1", AccountID: "acc", AgentID: "a1", State: "running"})
	if id := s.Recording("d1"); id != "" {
		t.Fatalf("the runner's desktop is recorded here too (%s)", id)
	}
	s.ToolBegan("a1", "run-1", "computer_screenshot", "computer_screenshot")
	time.Sleep(20 * time.Millisecond) // the call takes a moment: its start is before its end
	s.ToolEnded("run-1", "success", "image/png", "iVBORw0KGgo=")
	s.controlEvent(events.Control{Kind: "task_ended", DesktopID: "d1", AgentID: "a1", Holder: "Ada"})
	next := func() nodeapi.RecordingMark {
		select {
		case m := <-marks:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no marker was forwarded")
		}
		return nodeapi.RecordingMark{}
	}
	tool, turn := next(), next()
	if tool.DesktopID != "d1" || tool.Marker.Kind != MarkTool || tool.Marker.RunID != "run-1" || tool.Marker.Tool != "computer_screenshot" ||
		tool.ShotType != "image/png" || len(tool.Shot) != 8 || tool.BeganAgoMs < tool.AgoMs+20 {
		t.Errorf("tool marker %+v", tool)
	}
	if turn.Marker.Kind != MarkTurn || turn.Marker.Label != "turn ended: Ada" {
		t.Errorf("turn marker %+v", turn)
	}
	// A stopped desktop's markers go nowhere.
	s.desktopEvent(events.Desktop{InstanceID: "d1", NodeID: "r1", State: "stopped"})
	s.controlEvent(events.Control{Kind: "taken", DesktopID: "d1", Holder: "Bob"})

	st := s.Settings()
	st.NeverRecord = []string{"r1"}
	st.KeepDays = 3
	if _, err := s.SetSettings(st); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-pushed:
		if p.Record || p.KeepDays != 3 {
			t.Errorf("settings pushed %+v, want not recording, 3 days", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the settings were not pushed")
	}
	select {
	case m := <-marks:
		t.Errorf("a marker of a stopped desktop was forwarded: %+v", m)
	default:
	}
}

// TestAddMarkOnTheRunner: a marker made on the server joins the recording of its desktop on
// the runner, timed by the runner's clock from "how long ago", with its screenshot kept.
func TestAddMarkOnTheRunner(t *testing.T) {
	dir := t.TempDir()
	s := newService(t, dir)
	s.StartDesktop(Desktop{ID: "d1", Node: "r1", AccountID: "acc", AgentID: "a1"})
	id := s.Recording("d1")
	if id == "" {
		t.Fatal("no recording")
	}
	time.Sleep(50 * time.Millisecond)
	s.AddMark(nodeapi.RecordingMark{DesktopID: "d1", AgoMs: 10, BeganAgoMs: 40, ShotType: "image/jpeg", Shot: []byte("jpeg bytes"),
		Marker: nodeapi.RecordingMarker{Kind: MarkTool, Label: "computer_screenshot", RunID: "run-9", AgentID: "a2", Tool: "computer_screenshot",
			At: 999999, Shot: "../../etc/passwd"}})
	s.AddMark(nodeapi.RecordingMark{DesktopID: "elsewhere", Marker: nodeapi.RecordingMarker{Kind: MarkTurn, Label: "lost"}})
	i, err := s.Get("acc", "a2", id)
	if err != nil {
		t.Fatalf("the recording is not listed under the marker's agent: %v", err)
	}
	m := i.Markers[len(i.Markers)-1]
	if m.RunID != "run-9" || !m.Screenshot || m.At >= 999999 || m.BeganAt > m.At || m.At-m.BeganAt < 25 || m.At < 30 {
		t.Fatalf("marker %+v", m)
	}
	data, typ, err := s.ScreenshotData(id, len(i.Markers)-1)
	if err != nil || typ != "image/jpeg" || string(data) != "jpeg bytes" {
		t.Fatalf("screenshot %q %s %v", data, typ, err)
	}
	if _, err := os.Stat(filepath.Join(dir, id, m.Shot)); err != nil || filepath.Dir(m.Shot) != "." {
		t.Fatalf("the screenshot's file %q: %v", m.Shot, err)
	}
}
