package backend

import (
	"errors"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/internal/runnertest"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// TestStatsNodes: the sampler asks node "local" exactly once per tick whichever way it runs —
// over the managed local runner's link (runner) or the manager itself (direct) — and every
// connected runner that advertises stats-v1; a runner without it is left out.
func TestStatsNodes(t *testing.T) {
	for _, mode := range []string{LocalNodeRunner, LocalNodeDirect} {
		t.Run(mode, func(t *testing.T) {
			b, _ := startLocalNode(t, t.TempDir(), mode)
			t.Cleanup(func() { b.Close() })
			if mode == LocalNodeRunner {
				waitLocalLinked(t, b) // it connects in the background (TestStartDoesNotWaitForLocalRunner)
			}
			ts := httptest.NewServer(b.API.Handler())
			t.Cleanup(ts.Close)
			connect := func(name string, drop ...string) string {
				c, err := b.Nodes.Create(name, false, ts.URL)
				if err != nil {
					t.Fatal(err)
				}
				runnertest.Start(t, runner.Config{Server: ts.URL, Token: c.Token, DataDir: t.TempDir(), Engine: "none",
					MaxBackoff: 200 * time.Millisecond, DropCapabilities: drop})
				deadline := time.Now().Add(30 * time.Second)
				for !b.Nodes.Connected(c.ID) {
					if time.Now().After(deadline) {
						t.Fatalf("runner %s did not connect", name)
					}
					time.Sleep(10 * time.Millisecond)
				}
				return c.ID
			}
			current := connect("current")
			connect("older", wire.CapStats)

			var ids []string
			for _, n := range b.fleet.StatsNodes() {
				ids = append(ids, n.NodeID())
			}
			if want := []string{nodes.LocalID, current}; !slices.Equal(ids, want) {
				t.Fatalf("sampled nodes %v, want %v", ids, want)
			}
			local := b.fleet.StatsNodes()[0]
			if _, linked := local.(*nodes.Remote); linked != (mode == LocalNodeRunner) {
				t.Fatalf("mode %s: node local is sampled through %T", mode, local)
			}
			// Without an engine, every node answers that it has none (the sampler stays quiet
			// about it): the call went all the way there and back.
			for _, n := range b.fleet.StatsNodes() {
				if _, err := n.Stats(t.Context()); !errors.Is(err, fault.ErrUnavailable) {
					t.Fatalf("stats of %s: %v", n.NodeID(), err)
				}
			}
		})
	}
}
