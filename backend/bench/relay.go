package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/netns"
	noderunner "cubicle/runner"
	"cubicle/runner/wire"
)

// The relay rows put a desktop on an execution node (SPEC §4) and drive it from the server,
// next to a desktop of the server's own machine in the same run. The node is a real
// `cubicle runner` process (Config.RunnerCommand) in its own network namespace
// (internal/netns), reaching the bench's server over a veth link: it dials the server's
// GET /api/runner/connect (backend/nodes.Hub, the product's accept path), and the server
// drives its desktop through nodes.Remote — the same calls the backend routes an agent's
// desktop through when the agent is placed on a runner. The runner's prepared standard image is
// the run's peers image, so both desktops run the same image on the same engine; only the path
// differs:
//
//	local:  server → unix socket → driver
//	runner: server → yamux stream → websocket → TCP over veth → runner → unix socket → driver
//
// runner_exec is the driver's exec of `true` over each path, interleaved; runner_live_input is
// live_input (input message → changed update at a websocket client of the server's computer
// channel) with the channel fed by the relayed link, pairs of inputs alternating with the local one.
// Each row's Target gives what the relay adds to the p50 against RelayTarget. Without root,
// iproute2 or a program to start the runner from, both rows are kept without samples, marked
// skipped, saying why.

// Row ids of the relay rows.
const (
	RowRunnerExec      = "runner_exec"
	RowRunnerLiveInput = "runner_live_input"
)

// RelayTarget is what the runner relay may add to a round trip's p50 on a loopback-class link
// (issue 12).
const RelayTarget = 5 * time.Millisecond

// relayPeer names the peer of the relay rows: the server's own desktop, in the same run.
const relayPeer = "local desktop"

var relayTitles = map[string]string{
	RowRunnerExec:      "exec round trip (true) through a runner in another network namespace",
	RowRunnerLiveInput: "live view: input → changed frame, desktop on a runner in another network namespace",
}

// relayNode is the run's execution node: the server's registry and link endpoint, the runner
// process in its namespace and the desktop it runs.
type relayNode struct {
	r    *runner
	host *netns.Host
	st   *store.Store
	hub  *nodes.Hub
	srv  *http.Server
	done chan error // the server's Serve

	node   string
	remote *nodes.Remote
	proc   *exec.Cmd
	exited chan struct{} // closed when proc has ended
	out    *tailBuffer
	desk   *desktop
}

// relay measures the relay rows next to d, the run's local desktop.
func (r *runner) relay(ctx context.Context, d *desktop) error {
	why := ""
	if len(r.cfg.RunnerCommand) == 0 {
		why = "no cubicle program to start `cubicle runner` from (Config.RunnerCommand)"
	} else if err := netns.Available(); err != nil {
		why = err.Error()
	}
	if why != "" {
		r.skipped(why, RowRunnerExec, RowRunnerLiveInput)
		return nil
	}
	began := time.Now()
	n, err := r.startRelay(ctx)
	if n != nil {
		defer n.close()
	}
	if err != nil {
		return err
	}
	r.progress("  runner %s in namespace %s (%s → %s) is connected, its desktop %s drawn, after %.1f s",
		n.node, n.host.NS, n.host.Addr, n.host.ServerAddr, n.desk.name, time.Since(began).Seconds())
	rd := n.desk

	execTrue := func(c *guest.Client) func() error {
		return func() error {
			res, err := c.Exec(ctx, guest.ExecRequest{Command: []string{"true"}})
			if err == nil && res.ExitCode != 0 {
				err = fault.Unavailable("exec true: exit %d", res.ExitCode)
			}
			return err
		}
	}
	for _, f := range []func() error{execTrue(rd.client), execTrue(d.client)} { // warm-up
		if err := f(); err != nil {
			return err
		}
	}
	var viaRunner, local []float64
	if err := interleave(ctx, r.cfg.Counts.Fast, r.cfg.Counts.Fast,
		func(int) error { return timed(&viaRunner, execTrue(rd.client)) },
		func(int) error { return timed(&local, execTrue(d.client)) }); err != nil {
		return fmt.Errorf("exec through the runner: %w", err)
	}
	r.add(Row{ID: RowRunnerExec, Title: relayTitles[RowRunnerExec], Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "the driver's exec of true from the server through the runner relay (nodes.Remote.Link): the guest " +
			"protocol over a yamux stream over the runner's websocket, TCP across a veth link to a `cubicle runner` process in its own " +
			"network namespace, piped into its link to the desktop's driver; exit code back", Samples: viaRunner},
		PeerName: relayPeer, Peer: &Side{Method: "the same exec over the server's own link to a desktop of the same image on this " +
			"machine (the exec row's path), interleaved", Samples: local},
		Target: relayTarget(viaRunner, local)})

	// Live view: the computer channel of a server whose desktop is on the runner, next to one
	// whose desktop is local, pairs of inputs in turn.
	lsR, err := r.startLive(ctx, rd, rd.client, "live-runner.db")
	if err != nil {
		return err
	}
	defer lsR.close()
	lsL, err := r.startLive(ctx, d, d.client, "live-local.db")
	if err != nil {
		return err
	}
	defer lsL.close()
	cR, leaseR, err := takeOverLive(ctx, lsR)
	if err != nil {
		return fmt.Errorf("live view through the runner: %w", err)
	}
	defer cR.close()
	cL, leaseL, err := takeOverLive(ctx, lsL)
	if err != nil {
		return err
	}
	defer cL.close()
	// One pair of inputs (the menu opens, the menu closes) on each side in turn, after a
	// warm-up pair on each: the machine's load drifts alike for both.
	var latR, latL []float64
	for i := range max(r.cfg.Counts.LiveInputs, 2) / len(liveInputs) {
		s, err := inputLatency(ctx, cR, leaseR, len(liveInputs), i == 0)
		if err != nil {
			return fmt.Errorf("live view through the runner: %w", err)
		}
		latR = append(latR, s...)
		if s, err = inputLatency(ctx, cL, leaseL, len(liveInputs), i == 0); err != nil {
			return err
		}
		latL = append(latL, s...)
	}
	r.add(Row{ID: RowRunnerLiveInput, Title: relayTitles[RowRunnerLiveInput], Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "as live_input (version 2, the UI's protocol), the server's computer channel fed by the relayed link " +
			"to the desktop on the runner: input over the relay to its driver, the region stream back over it", Samples: latR},
		PeerName: relayPeer, Peer: &Side{Method: "as live_input with the server's own desktop of the same image, on another server " +
			"of the same process, pairs of inputs alternating with the relay's", Samples: latL},
		Target: relayTarget(latR, latL)})
	r.progress("  the relay rows took %.1f s, the runner's start included", time.Since(began).Seconds())
	return nil
}

// relayTarget says what the relay adds to the p50 and p95, against RelayTarget.
func relayTarget(relay, local []float64) string {
	r, l := Summarize(relay), Summarize(local)
	add := r.P50 - l.P50
	verdict := "met"
	if add > ms(RelayTarget) {
		verdict = "missed"
	}
	return fmt.Sprintf("the relay adds %.2f ms to the p50 (%.2f ms to the p95); target ≤ %.0f ms p50 on a loopback-class link: %s",
		add, r.P95-l.P95, ms(RelayTarget), verdict)
}

// skipped keeps rows ids without samples, marked skipped, saying why.
func (r *runner) skipped(why string, ids ...string) {
	r.progress("  not measured (%s): %s", strings.Join(ids, ", "), why)
	for _, id := range ids {
		r.add(Row{ID: id, Title: relayTitles[id], Unit: UnitMS, Better: "lower", Skipped: true, Note: "skipped: " + why})
	}
}

// startRelay makes the namespace, serves the runner link on the server's end of it, starts
// the runner there and creates the desktop of an agent placed on it. On an error the caller
// still closes the returned node (nil when nothing was made).
func (r *runner) startRelay(ctx context.Context) (*relayNode, error) {
	host, err := netns.New("cubb")
	if err != nil {
		return nil, err
	}
	n := &relayNode{r: r, host: host, out: &tailBuffer{max: 16 << 10}}
	if n.st, err = store.Open(filepath.Join(r.runRoot, "relay-server.db"), store.Options{Logger: r.log, KeepBackups: -1}); err != nil {
		return n, err
	}
	const agentID = "bench-relay"
	if err := n.st.CreateAccount(store.Account{ID: benchAccount, Username: benchAccount, Role: store.RoleAdmin}); err != nil {
		return n, err
	}
	if err := n.st.CreateAgent(store.Agent{ID: agentID, AccountID: benchAccount, Name: agentID, Computer: "vm",
		CreatedAt: time.Now().UTC()}); err != nil {
		return n, err
	}
	if n.hub, err = nodes.New(nodes.Config{Store: n.st, Logger: r.log, Version: r.cfg.Version}); err != nil {
		return n, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host.ServerAddr, "0"))
	if err != nil {
		return n, fault.Unavailable("bench: listen on the namespace's link %s: %v", host.ServerAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+wire.ConnectPath, n.hub)
	n.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	n.done = make(chan error, 1)
	go func() { n.done <- n.srv.Serve(ln) }() // owned: close shuts it down and waits
	url := "http://" + ln.Addr().String()
	created, err := n.hub.Create("bench-relay", false, url)
	if err != nil {
		return n, err
	}
	n.node = created.ID

	// The runner's store: the run's peers image is its prepared standard image (as the run's
	// own desktops have it), so it builds nothing.
	dir := filepath.Join(r.runRoot, "runner")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return n, err
	}
	rst, err := store.Open(filepath.Join(dir, noderunner.DBFile), store.Options{Logger: r.log, KeepBackups: -1})
	if err != nil {
		return n, err
	}
	err = rst.PutVMImage(store.VMImage{NodeID: n.node, Key: "standard", Ref: r.rep.Images.Peers, ImageID: r.rep.Images.PeersID,
		PreparedAt: time.Now().UTC()})
	if cerr := rst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}

	argv := append(append(host.Wrap(), r.cfg.RunnerCommand...), "runner", "--server", url, "--data-dir", dir,
		"--engine", string(r.cfg.EngineKind), "--name", "bench-relay", "--log-level", "warn")
	n.proc = exec.Command(argv[0], argv[1:]...)
	// The token goes in the environment, which other users cannot read in the process list.
	n.proc.Env = append(append(os.Environ(), r.cfg.RunnerEnv...), "CUBICLE_RUNNER_TOKEN="+created.Token)
	n.proc.Stdout, n.proc.Stderr = n.out, n.out
	if err := n.proc.Start(); err != nil {
		n.proc = nil
		return n, fault.Unavailable("bench: start %s: %v", strings.Join(argv, " "), err)
	}
	n.exited = make(chan struct{})
	go func() { n.proc.Wait(); close(n.exited) }() // owned: close ends the process

	deadline := time.Now().Add(time.Minute)
	for !n.hub.Connected(n.node) {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-n.exited:
			return n, fault.Unavailable("bench: the runner ended before it connected: %s", n.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return n, fault.Unavailable("bench: the runner did not connect to %s within a minute: %s", url, n.out.String())
		}
	}
	if n.remote, err = n.hub.Node(n.node); err != nil {
		return n, err
	}
	if _, err := n.remote.SetIdlePolicy(ctx, "bench", 0, nil); err != nil {
		return n, err
	}
	v, err := n.remote.Act(ctx, benchAccount, agentID, vm.ActionCreate)
	if err != nil {
		return n, fmt.Errorf("bench: create a desktop on the runner: %w", err)
	}
	n.desk = &desktop{agent: agentID, instance: v.Desktop.ID, id: v.Desktop.Container, name: v.Desktop.Container}
	if n.desk.client, err = n.remote.Link(ctx, v.Desktop.ID); err != nil {
		return n, fmt.Errorf("bench: the relayed link to the runner's desktop: %w", err)
	}
	if err := r.firstRealScreenshot(ctx, n.desk); err != nil {
		return n, err
	}
	return n, nil
}

// close removes the runner's desktop and data, stops the runner, the server and the
// namespace, and removes whatever the node left on the engine. It runs after the run's
// context may have ended.
func (n *relayNode) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if n.remote != nil && n.hub.Connected(n.node) {
		if err := n.remote.ForgetAgent(ctx, benchAccount, "bench-relay", true, true); err != nil {
			n.r.log.Warn("bench: remove the runner's desktop", "err", err)
		}
	}
	if n.proc != nil {
		n.proc.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(time.Minute):
			n.proc.Process.Kill()
			<-n.exited
		}
	}
	if n.srv != nil {
		n.srv.Close()
		<-n.done
	}
	if n.hub != nil {
		n.hub.Close()
	}
	if n.st != nil {
		n.st.Close()
	}
	if n.node != "" {
		n.r.removeNode(ctx, n.node)
	}
	if err := n.host.Close(); err != nil {
		n.r.log.Warn("bench: remove the runner's network namespace", "ns", n.host.NS, "err", err)
	}
}

// removeNode removes the containers and volumes of execution node id from the engine.
func (r *runner) removeNode(ctx context.Context, id string) {
	sel := map[string]string{vm.LabelNode: id}
	if cs, err := r.cfg.Engine.ListContainers(ctx, sel); err == nil {
		for _, c := range cs {
			if err := r.cfg.Engine.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
				r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("runner node %s: remove container %s: %v", id, c.Name, err))
			}
		}
	}
	if vs, err := r.cfg.Engine.ListVolumes(ctx, sel); err == nil {
		for _, v := range vs {
			if err := r.cfg.Engine.RemoveVolume(ctx, v); err != nil && !errors.Is(err, fault.ErrNotFound) {
				r.rep.Warnings = append(r.rep.Warnings, fmt.Sprintf("runner node %s: remove volume %s: %v", id, v, err))
			}
		}
	}
}

// tailBuffer keeps the last max bytes written to it (a child process's output).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.b.String())
}
