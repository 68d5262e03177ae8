package backend

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fleet"
	"cubicle/backend/guest"
	"cubicle/backend/nodes"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// TestLocalNodeUpgradeBothWays: a data file whose local desktop, node settings and prepared
// image were made by the direct path keeps all of them when the server starts with the
// managed local runner — the desktop starts again over the runner link with its workspace —
// and back: what the runner path wrote is there for the direct path. Real Podman, the real
// standard image.
func TestLocalNodeUpgradeBothWays(t *testing.T) {
	testenv.RootPodman(t)
	if testing.Short() {
		t.Skip("real desktop test; run without -short")
	}
	data := filepath.Join(t.TempDir(), "data")
	log := testenv.Logger(t, slog.LevelWarn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	open := func(mode string) *Backend {
		t.Helper()
		b, err := New(Config{DataDir: data, Engine: "podman", LocalNode: mode, AllowedHosts: []string{"127.0.0.1"}, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.WaitEngine(ctx); err != nil {
			t.Fatal(err)
		}
		if mode == LocalNodeRunner {
			waitLocalLinked(t, b) // it connects in the background (TestStartDoesNotWaitForLocalRunner)
		}
		if _, linked := mustLocal(t, b).(*nodes.Remote); linked != (mode == LocalNodeRunner) {
			t.Fatalf("mode %s: node local is %T", mode, mustLocal(t, b))
		}
		return b
	}
	b := open(LocalNodeDirect)
	storeID := b.Store.Identity().ID
	t.Cleanup(func() { removeStoreObjects(t, storeID) })
	if _, err := b.VMs.Prepare(ctx, "standard"); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	local := mustLocal(t, b)
	if _, err := local.SetIdlePolicy(ctx, "upgrade-1", 17, nil); err != nil {
		t.Fatal(err)
	}
	v, err := local.Act(ctx, admin.ID, ag.ID, vm.ActionCreate)
	if err != nil {
		t.Fatal(err)
	}
	desk := v.Desktop.ID
	shell(t, ctx, local, desk, "echo made-direct > up.txt")
	b.Close()

	// direct → runner → direct: each time the same desktop, settings, image and workspace.
	for i, mode := range []string{LocalNodeRunner, LocalNodeDirect} {
		b := open(mode)
		local := mustLocal(t, b)
		st, err := local.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		prepared := false
		for _, im := range st.Images {
			prepared = prepared || (im.Key == "standard" && im.Prepared)
		}
		if !prepared || st.Policy.IdleStopMinutes != 17 {
			t.Fatalf("%s: node status lost the prepared image or the idle policy: %+v", mode, st)
		}
		found := false
		for _, in := range st.Instances {
			found = found || in.ID == desk
		}
		if !found {
			t.Fatalf("%s: the desktop %s is not listed: %+v", mode, desk, st.Instances)
		}
		v, err := local.Act(ctx, admin.ID, ag.ID, vm.ActionStart)
		if err != nil || v.Desktop.ID != desk || v.Desktop.State != vm.StateRunning {
			t.Fatalf("%s: start: %+v, %v", mode, v.Desktop, err)
		}
		want := "made-direct"
		if i == 1 {
			want += "\nmade-runner"
		}
		if out := shell(t, ctx, local, desk, "cat up.txt"); strings.TrimSpace(out) != want {
			t.Fatalf("%s: workspace %q, want %q", mode, out, want)
		}
		if mode == LocalNodeRunner {
			shell(t, ctx, local, desk, "echo made-runner >> up.txt")
		}
		b.Close()
	}
}

// mustLocal is node "local" as the backend routes it.
func mustLocal(t *testing.T, b *Backend) fleet.Node {
	t.Helper()
	n, err := b.fleet.Node(nodes.LocalID)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// shell runs cmd in desktop id's workspace over node n's driver link and returns its stdout.
func shell(t *testing.T, ctx context.Context, n fleet.Node, id, cmd string) string {
	t.Helper()
	c, err := n.Link(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, guest.ExecRequest{Shell: cmd})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %+v %s, %v", cmd, res, res.Stderr, err)
	}
	return string(res.Stdout)
}

// BenchmarkLocalNode measures what the managed local runner costs on node "local": one
// desktop of the real standard image, its driver reached directly (vm.Manager.Link) and
// through the managed runner's link (nodes.Remote.Link: hub, yamux stream, the runner's relay
// into the same driver), the two calls interleaved in the same run. Each sub-benchmark
// reports the p50 of both ways and their difference in ms:
//
//	go test -run '^$' -bench BenchmarkLocalNode -benchtime 300x ./backend
func BenchmarkLocalNode(bb *testing.B) {
	if _, err := os.Stat("/run/podman/podman.sock"); err != nil || os.Getuid() != 0 {
		bb.Skip("needs root and the Podman service")
	}
	data := filepath.Join(bb.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	b, err := New(Config{DataDir: data, Engine: "podman", LocalNode: LocalNodeRunner, AllowedHosts: []string{"127.0.0.1"}})
	if err != nil {
		bb.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(ctx); err != nil {
		bb.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		bb.Fatal(err)
	}
	storeID := b.Store.Identity().ID
	defer removeStoreObjects(bb, storeID)
	if _, err := b.VMs.Prepare(ctx, "standard"); err != nil {
		bb.Fatal(err)
	}
	admin, err := b.Auth.Admin()
	if err != nil {
		bb.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Bench")
	if err != nil {
		bb.Fatal(err)
	}
	remote, err := b.fleet.Node(nodes.LocalID)
	if err != nil {
		bb.Fatal(err)
	}
	v, err := remote.Act(ctx, admin.ID, ag.ID, vm.ActionCreate)
	if err != nil {
		bb.Fatal(err)
	}
	direct, err := b.VMs.Link(ctx, v.Desktop.ID)
	if err != nil {
		bb.Fatal(err)
	}
	linked, err := remote.Link(ctx, v.Desktop.ID)
	if err != nil {
		bb.Fatal(err)
	}
	if direct == linked {
		bb.Fatal("the runner path handed out the direct link")
	}
	ops := []struct {
		name string
		do   func(c *guest.Client, i int) error
	}{
		{"exec", func(c *guest.Client, _ int) error {
			res, err := c.Exec(ctx, guest.ExecRequest{Command: []string{"true"}})
			if err == nil && res.ExitCode != 0 {
				err = os.ErrInvalid
			}
			return err
		}},
		{"input", func(c *guest.Client, i int) error {
			return c.Input(ctx, guest.Input{Action: "move", X: 100 + i%200, Y: 100 + i%150})
		}},
		{"screenshot", func(c *guest.Client, _ int) error {
			_, err := c.Screenshot(ctx, guest.ScreenshotOptions{})
			return err
		}},
	}
	for _, op := range ops {
		bb.Run(op.name, func(bb *testing.B) {
			var d, r []float64
			timed := func(c *guest.Client, i int, into *[]float64) {
				t0 := time.Now()
				if err := op.do(c, i); err != nil {
					bb.Fatal(err)
				}
				*into = append(*into, float64(time.Since(t0).Microseconds())/1000)
			}
			for i := 0; bb.Loop(); i++ {
				if i%2 == 0 {
					timed(direct, i, &d)
					timed(linked, i, &r)
				} else {
					timed(linked, i, &r)
					timed(direct, i, &d)
				}
			}
			pd, pr := p50(d), p50(r)
			bb.ReportMetric(pd, "direct-p50-ms")
			bb.ReportMetric(pr, "runner-p50-ms")
			bb.ReportMetric(pr-pd, "added-p50-ms")
		})
	}
}

// p50 is the median of xs.
func p50(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
