package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/link"
)

// The exec link (backend/link) reaches a desktop's driver through an exec session of the
// engine API instead of the run directory's socket: the portable path (macOS, Windows, remote
// engines). These rows measure it on the same desktop, in the same run, next to the socket
// link: an exec round trip (peer: `podman exec`, as the socket link's exec row; the note
// compares it with the socket link), a JPEG screenshot and the live view's input → changed
// frame (peer: the socket link).

// openExecLink opens an exec link to d's driver (a second connection next to d.client).
func (r *runner) openExecLink(ctx context.Context, d *desktop) (*guest.Client, error) {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.ReadyTimeout)
	defer cancel()
	conn, err := link.Exec{Engine: r.cfg.Engine}.Open(wctx, link.Target{InstanceID: d.name, ContainerID: d.id})
	if err != nil {
		return nil, fmt.Errorf("bench: exec link to %s: %w", d.name, err)
	}
	c, err := guest.NewClient(wctx, conn, guest.Options{Name: "desktop " + d.name + " (exec link)"})
	if err != nil {
		return nil, fmt.Errorf("bench: exec link to %s: %w", d.name, err)
	}
	return c, nil
}

// execLink measures the exec link's rows.
func (r *runner) execLink(ctx context.Context, d *desktop) error {
	x, err := r.openExecLink(ctx, d)
	if err != nil {
		return err
	}
	defer x.Close()
	// The peer is the desktop's own link: the socket link wherever the app uses it (a local
	// Linux engine); with an engine that only the exec link reaches, both sides are exec links.
	sock := d.client
	peerName := r.fleet.m.LinkState(d.instance).Transport + " link"
	execTrue := func(c *guest.Client) func() error {
		return func() error {
			res, err := c.Exec(ctx, guest.ExecRequest{Command: []string{"true"}})
			if err == nil && res.ExitCode != 0 {
				err = fault.Unavailable("exec true: exit %d", res.ExitCode)
			}
			return err
		}
	}
	podmanExec := func() error {
		out, err := exec.CommandContext(ctx, r.cfg.ExecCLI, "exec", d.id, "true").CombinedOutput()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fault.Unavailable("%s exec %s true: %v: %s", r.cfg.ExecCLI, d.name, err, bytes.TrimSpace(out))
		}
		return nil
	}
	for _, f := range []func() error{execTrue(x), execTrue(sock), podmanExec} { // warm-up
		if err := f(); err != nil {
			return err
		}
	}
	// Exec: the exec link and the socket link alternate, `podman exec` in between.
	var ex, so, pe []float64
	err = interleave(ctx, r.cfg.Counts.Fast, r.cfg.Counts.Peer, func(int) error {
		if err := timed(&ex, execTrue(x)); err != nil {
			return err
		}
		return timed(&so, execTrue(sock))
	}, func(int) error { return timed(&pe, podmanExec) })
	if err != nil {
		return err
	}
	exP50, soP50, peP50 := Summarize(ex).P50, Summarize(so).P50, Summarize(pe).P50
	r.add(Row{ID: "exec_link_exec", Title: "exec round trip (true) over the exec link", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "driver exec over an exec session of the engine API (cubicle-guest --relay in the container, " +
			"its stdin/stdout carrying the protocol): fork+exec of true, exit code back", Samples: ex},
		PeerName: r.cfg.ExecCLI + " exec", Peer: &Side{Method: r.cfg.ExecCLI + " exec CONTAINER true, forked on the host", Samples: pe},
		Note: fmt.Sprintf("the %s in the same run: p50 %.3g ms, so the exec link takes %.2f× the %s and is %.0f× faster than %s exec",
			peerName, soP50, ratio(exP50, soP50), peerName, ratio(peP50, exP50), r.cfg.ExecCLI)})

	// JPEG screenshot: the agent's format, over each link in turn.
	shot := func(c *guest.Client) func() error {
		return func() error {
			f, err := c.Screenshot(ctx, agentShot)
			if err == nil && (f.Width != 1280 || f.Height != 800 || len(f.Data) == 0) {
				err = fault.Unavailable("screenshot is %dx%d with %d bytes, want 1280x800", f.Width, f.Height, len(f.Data))
			}
			return err
		}
	}
	// The screen keeps changing meanwhile (the live view's animation), so every screenshot is
	// a new capture and encode, as after an agent's action — not the driver's copy of the last
	// frame of an unchanged screen.
	actx, stopAnim := context.WithCancel(ctx)
	animDone := make(chan error, 1)
	go func() { // owned: stopAnim ends it (the driver kills the program's process group)
		_, err := sock.Exec(actx, guest.ExecRequest{Command: animation, Timeout: 10 * time.Minute})
		animDone <- err
	}()
	var xs, ss []float64
	err = func() error {
		defer func() { stopAnim(); <-animDone }()
		if err := waitChanging(ctx, sock); err != nil {
			return err
		}
		return interleave(ctx, r.cfg.Counts.Fast, r.cfg.Counts.Fast,
			func(int) error { return timed(&xs, shot(x)) },
			func(int) error { return timed(&ss, shot(sock)) })
	}()
	if err != nil {
		return err
	}
	r.add(Row{ID: "exec_link_screenshot_jpeg", Title: "screenshot 1280x800, JPEG q75, over the exec link, screen changing", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "driver screenshot (capture + JPEG encode of a changed screen) through the exec session: relay → engine → host; " +
			fmt.Sprintf("%v runs meanwhile", animation), Samples: xs},
		PeerName: peerName, Peer: &Side{Method: "the same screenshot over the desktop's own link (the run directory's unix socket), interleaved", Samples: ss}})

	// Live view: input → changed frame, the channel fed by each link in turn.
	liveLat := func(c *guest.Client, db string) ([]float64, error) {
		ls, err := r.startLive(ctx, d, c, db)
		if err != nil {
			return nil, err
		}
		defer ls.close()
		wc, lease, err := takeOverLive(ctx, ls)
		if err != nil {
			return nil, err
		}
		defer wc.close()
		return r.liveInputLatency(ctx, wc, lease)
	}
	xl, err := liveLat(x, "live-exec.db")
	if err != nil {
		return fmt.Errorf("over the exec link: %w", err)
	}
	sl, err := liveLat(sock, "live-socket.db")
	if err != nil {
		return fmt.Errorf("over the socket link: %w", err)
	}
	r.add(Row{ID: "exec_link_live_input", Title: "live view: input → changed frame, over the exec link", Unit: UnitMS, Better: "lower",
		Ours:     Side{Method: "as live_input, the computer channel's input and frame stream going through the exec session", Samples: xl},
		PeerName: peerName, Peer: &Side{Method: "as live_input over the desktop's own link (the unix socket), measured right after", Samples: sl}})
	return nil
}

// ratio is a / b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// waitChanging waits (up to 30 s) until consecutive screenshots show different screens.
func waitChanging(ctx context.Context, c *guest.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	var last uint64
	changes := 0
	for changes < 5 {
		if time.Now().After(deadline) {
			return fault.Unavailable("bench: the animation (%v) did not make the screen change: is ImageMagick installed in the peers image?", animation)
		}
		f, err := c.Screenshot(ctx, agentShot)
		if err != nil {
			return err
		}
		if last != 0 && f.ID != last {
			changes++
		}
		last = f.ID
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
