package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The server start rows (issue 31 item 1): a real `cubicle serve` process (Config.RunnerCommand
// with "serve"), timed from its start to the first 200 of /api/health, on a fresh data
// directory (server_start) and again on the same directory once the first has stopped
// (server_restart). The peer is the same program with the container engine off and node
// "local" direct (CUBICLE_ENGINE=none, CUBICLE_LOCAL_NODE=direct): the floor of a start
// (process, data file, HTTP), so the rows show what the engine and the managed local runner
// add to a start. The target: a person's window answers within ServerStartTarget.

// Row ids of the server start rows.
const (
	RowServerStart   = "server_start"
	RowServerRestart = "server_restart"
)

// ServerStartTarget is the most a start may take to the first answer (p50).
const ServerStartTarget = time.Second

var serverTitles = map[string]string{
	RowServerStart:   "server start to the first /api/health 200, fresh data directory",
	RowServerRestart: "server restart to the first /api/health 200, existing data directory",
}

const serverPeer = "serve, engine off"

func (r *runner) serverStart(ctx context.Context, _ *desktop) error {
	if len(r.cfg.RunnerCommand) == 0 {
		why := "no cubicle program to start `cubicle serve` from (Config.RunnerCommand)"
		r.progress("  not measured (%s, %s): %s", RowServerStart, RowServerRestart, why)
		for _, id := range []string{RowServerStart, RowServerRestart} {
			r.add(Row{ID: id, Title: serverTitles[id], Unit: UnitMS, Better: "lower", Skipped: true, Note: "skipped: " + why})
		}
		return nil
	}
	root, err := os.MkdirTemp(r.cfg.WorkDir, "cubicle-bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	floor := []string{"CUBICLE_ENGINE=none", "CUBICLE_LOCAL_NODE=direct"}
	var start, restart, peerStart, peerRestart []float64
	for i := range max(r.cfg.Counts.ColdStarts, 3) {
		ours, peer := filepath.Join(root, fmt.Sprintf("ours-%d", i)), filepath.Join(root, fmt.Sprintf("floor-%d", i))
		for _, m := range []struct {
			dir string
			env []string
			out *[]float64
		}{{ours, nil, &start}, {peer, floor, &peerStart}, {ours, nil, &restart}, {peer, floor, &peerRestart}} {
			d, err := r.timeServe(ctx, m.dir, m.env)
			if err != nil {
				return err
			}
			*m.out = append(*m.out, ms(d))
		}
	}
	method := "a `cubicle serve` process on a free loopback port, timed from its start to the first 200 of /api/health " +
		"(polled every 5 ms), with this machine's engine and the managed local runner, then stopped with SIGTERM"
	peerMethod := "the same with CUBICLE_ENGINE=none and CUBICLE_LOCAL_NODE=direct (no engine, no runner: the floor of a start), interleaved"
	for _, row := range []struct {
		id         string
		ours, peer []float64
		what       string
	}{{RowServerStart, start, peerStart, "; a new data directory each time"},
		{RowServerRestart, restart, peerRestart, "; the data directory of the start before (data file, backup and secrets exist)"}} {
		verdict := "met"
		if Summarize(row.ours).P50 > ms(ServerStartTarget) {
			verdict = "missed"
		}
		r.add(Row{ID: row.id, Title: serverTitles[row.id], Unit: UnitMS, Better: "lower",
			Ours:     Side{Method: method + row.what, Samples: row.ours},
			PeerName: serverPeer, Peer: &Side{Method: peerMethod + row.what, Samples: row.peer},
			Target: fmt.Sprintf("target ≤ %.0f ms p50 (the window, web UI and API answer at once; engines and runners connect behind): %s", ms(ServerStartTarget), verdict)})
	}
	return nil
}

// timeServe starts `cubicle serve` on data directory dir with env added, waits for its first
// /api/health 200 and returns how long that took; it stops the process (SIGTERM, then kill
// after 30 s) before it returns.
func (r *runner) timeServe(ctx context.Context, dir string, env []string) (time.Duration, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	argv := append(append([]string{}, r.cfg.RunnerCommand...), "serve", "--listen", addr, "--data-dir", dir, "--log-level", "warn")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), r.cfg.RunnerEnv...), env...)
	out := &tailBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start cubicle serve: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // owned: ends with the process, which this function stops
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	client := &http.Client{Timeout: time.Second}
	url := "http://" + addr + "/api/health"
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				took := time.Since(began)
				stop()
				return took, nil
			}
		}
		select {
		case err := <-exited:
			return 0, fmt.Errorf("cubicle serve ended before it answered (%v): %s", err, strings.TrimSpace(out.String()))
		case <-ctx.Done():
			stop()
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return 0, errors.New("cubicle serve did not answer /api/health within 2 minutes: " + strings.TrimSpace(out.String()))
		}
	}
}

// freePort returns a loopback port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
