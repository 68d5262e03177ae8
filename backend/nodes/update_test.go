package nodes_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/release"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// TestUpdatePlanAndRequire: channels and the dist decide a runner's target version and whether
// an update is offered; a runner lacking a capability is refused a setting that needs it; an
// update the runner cannot download is reported and leaves it running.
func TestUpdatePlanAndRequire(t *testing.T) {
	st := mustStore(t)
	dist := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dist, "10.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "10.0.0", release.FileName(runtime.GOOS, runtime.GOARCH)), []byte("new binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := nodes.New(nodes.Config{Store: st, Version: "9.9.9",
		Dist: release.NewDist(release.DistConfig{Version: "9.9.9", Dirs: []string{dist}, Executable: func() (string, error) { return "", errors.New("none") }})})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+wire.ConnectPath, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); h.Close() })

	cur, _ := h.Create("current", false, srv.URL)
	old, _ := h.Create("older", false, srv.URL)
	startRunner(t, srv.URL, cur.Token)
	r, err := runner.New(runner.Config{Server: srv.URL, Token: old.Token, DataDir: t.TempDir(), Engine: "none", Version: "9.9.8",
		DropCapabilities: []string{wire.CapIdlePolicy, wire.CapSelfUpdate}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	oldDone := make(chan error, 1)
	go func() { oldDone <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-oldDone; r.Close() })
	waitFor(t, "both runners connected", func() bool { return h.Connected(cur.ID) && h.Connected(old.ID) })

	view := func(id string) nodes.View {
		vs, err := h.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if v.ID == id {
				return v
			}
		}
		t.Fatalf("%s not listed", id)
		return nodes.View{}
	}
	// Defaults: release = the server's version, which the current runner runs.
	if v := view(cur.ID); v.TargetVersion != "9.9.9" || v.UpdateAvailable || v.Channel != release.ChannelRelease {
		t.Fatalf("default plan %+v", v)
	}
	// A version the dist does not offer is refused; one it offers is saved.
	if _, err := h.SetChannels(release.Channels{Release: release.Channel{Version: "11.0.0", RolloutPercent: 100},
		Canary: release.Channel{Version: "10.0.0"}}, "t"); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("unoffered version: %v", err)
	}
	if _, err := h.SetChannels(release.Channels{Release: release.Channel{Version: "10.0.0", RolloutPercent: 100},
		Canary: release.Channel{Version: "10.0.0"}}, "t"); err != nil {
		t.Fatal(err)
	}
	if v := view(cur.ID); v.TargetVersion != "10.0.0" || !v.UpdateAvailable || v.UpdateProblem != "" {
		t.Fatalf("plan with 10.0.0 offered %+v", v)
	}
	// The older runner cannot update itself: no update offered, and the problem says why.
	if v := view(old.ID); v.UpdateAvailable || !strings.Contains(v.UpdateProblem, "cannot update itself") {
		t.Fatalf("older runner %+v", v)
	}

	// Require: the older runner lacks idle-policy-v1.
	err = h.Require(old.ID, wire.CapIdlePolicy, "the idle policy")
	if !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "runner older ("+old.ID+") runs version 9.9.8 without idle-policy-v1: update it (Settings → Runners → Update)") {
		t.Fatalf("require on the older runner: %v", err)
	}
	for _, node := range []string{cur.ID, nodes.LocalID, ""} {
		if err := h.Require(node, wire.CapIdlePolicy, "x"); err != nil {
			t.Fatalf("require on %q: %v", node, err)
		}
	}
	if _, err := h.SetChannel(nodes.LocalID, "canary"); !errors.Is(err, fault.ErrInvalid) {
		t.Fatal(err)
	}
	if _, err := h.Update(context.Background(), old.ID); !errors.Is(err, fault.ErrConflict) {
		t.Fatalf("update of a runner without self-update: %v", err)
	}

	// This test server has no download route: the runner reports the failed download and keeps
	// running (its link stays up, Run has not returned).
	uctx, ucancel := context.WithTimeout(context.Background(), time.Minute)
	defer ucancel()
	_, err = h.Update(uctx, cur.ID)
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "kept version 9.9.9") || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("update with a failing download: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if !h.Connected(cur.ID) {
		t.Fatal("a failed update dropped the runner's link")
	}
}
