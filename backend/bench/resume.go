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
	"cubicle/backend/vm"
)

// The resume row (issue 25): a paused desktop (vm.Manager.Pause: the engine's cgroup freezer,
// memory kept) back to its first drawn screenshot through the product's Resume, next to the
// engine's own `podman unpause` of the same container in the same run.
const (
	RowResume = "resume"
	// ResumeTarget is the most a resume may take to the first drawn screenshot (p50).
	ResumeTarget = 100 * time.Millisecond
)

// resumeNote says why the hosted sandboxes' resume is not a peer of the row.
const resumeNote = "E2B documents its sandbox resume at about 1 s; it runs in E2B's cloud (an account, the network), so it is not measured here. " +
	"The peer is the engine's unpause of the same container without the product's records and driver check"

// resume pauses the kept desktop and times its resume to the first drawn screenshot, ours
// (vm.Manager.Resume, then the manager's driver link) interleaved with the engine CLI's
// unpause (a pause by the same CLI first). The desktop runs again afterwards.
func (r *runner) resume(ctx context.Context, d *desktop) error {
	m := r.fleet.m
	cli := r.cfg.ExecCLI
	engineCLI := func(verb string) error {
		out, err := exec.CommandContext(ctx, cli, verb, d.id).CombinedOutput()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fault.Unavailable("%s %s %s: %v: %s", cli, verb, d.name, err, bytes.TrimSpace(out))
		}
		return nil
	}
	ours := func() error {
		// The engine's events of a peer sample are followed by the manager: wait until its
		// record says running again, or Pause would take the desktop for paused already.
		if err := r.settled(ctx, d); err != nil {
			return err
		}
		v, err := m.Pause(ctx, benchAccount, d.agent)
		if err != nil {
			return fmt.Errorf("bench: pause desktop %s: %w", d.agent, err)
		}
		if err := r.frozen(ctx, d, v.Desktop.State); err != nil {
			return err
		}
		d.client = nil
		return nil
	}
	oursResume := func() error {
		v, err := m.Resume(ctx, benchAccount, d.agent)
		if err != nil {
			return fmt.Errorf("bench: resume desktop %s: %w", d.agent, err)
		}
		if v.Desktop.State != vm.StateRunning {
			return fault.Unavailable("bench: desktop %s is %s after its resume, want running", d.agent, v.Desktop.State)
		}
		c, err := m.Link(ctx, d.instance)
		if err != nil {
			return fmt.Errorf("bench: desktop %s: %w", d.name, err)
		}
		d.client = c
		return r.firstRealScreenshot(ctx, d)
	}
	// The peer's screenshots go over a driver connection of its own, opened before the
	// pauses and held through them (no heartbeat, so a freeze does not end it): the manager
	// drops its own link when it records the desktop paused (it follows the engine's events).
	own, err := r.openOwnLink(ctx, d)
	if err != nil {
		return err
	}
	defer own.Close()
	ownShot := &desktop{agent: d.agent, instance: d.instance, id: d.id, name: d.name, client: own}
	peerPause := func() error {
		if err := r.settled(ctx, d); err != nil {
			return err
		}
		// runc's cgroup v1 freezer gives up now and then on a busy machine ("unable to
		// freeze"); like the product's pause (vm's pauseRetrying), try again after a moment.
		wait := 250 * time.Millisecond
		for try := 1; ; try++ {
			err := engineCLI("pause")
			if err == nil {
				break
			}
			if try == 4 || ctx.Err() != nil {
				return err
			}
			r.log.Warn("the engine's pause failed; trying again", "container", d.name, "try", try, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			wait *= 2
		}
		return r.frozen(ctx, d, vm.StatePaused)
	}
	peerResume := func() error {
		if err := engineCLI("unpause"); err != nil {
			return err
		}
		return r.firstRealScreenshot(ctx, ownShot)
	}
	// Warm-up: the first pause of a container sets up its freezer.
	if err := ours(); err != nil {
		return err
	}
	if err := oursResume(); err != nil {
		return err
	}
	if err := peerPause(); err != nil {
		return err
	}
	if err := peerResume(); err != nil {
		return err
	}
	n := max(r.cfg.Counts.Resumes, 1)
	var o, p []float64
	err = interleave(ctx, n, n, func(int) error {
		if err := ours(); err != nil {
			return err
		}
		return timed(&o, oursResume)
	}, func(int) error {
		if err := peerPause(); err != nil {
			return err
		}
		return timed(&p, peerResume)
	})
	if err == nil {
		err = r.settled(ctx, d) // the next steps use the desktop through the manager
	}
	if err != nil {
		return err
	}
	r.add(Row{ID: RowResume, Title: "resume of a paused desktop → first drawn screenshot", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "the product's pause (vm.Manager.Pause: the engine's cgroup freezer, memory kept), untimed; then the product's resume " +
			"(vm.Manager.Resume: engine unpause, recorded running, driver link checked), the manager's driver link, and PNG screenshots until one has ≥16 colours", Samples: o},
		PeerName: cli + " unpause", Peer: &Side{Method: cli + " pause CONTAINER forked on the host, untimed; then " + cli +
			" unpause CONTAINER forked on the host and the same screenshots over a driver connection (same transport) held open through the pause", Samples: p},
		Note:   resumeNote,
		Target: targetLine(o, ResumeTarget)})
	return nil
}

// settled waits (up to 10 s) until the manager records d's desktop running and the engine
// runs it unfrozen, and takes the manager's driver link.
func (r *runner) settled(ctx context.Context, d *desktop) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := r.fleet.st.VMInstance(d.instance)
		if err != nil {
			return err
		}
		st, err := r.cfg.Engine.InspectContainer(ctx, d.id)
		if err != nil {
			return err
		}
		if in.State == vm.StateRunning && st.Running && !st.Paused {
			c, err := r.fleet.m.Link(ctx, d.instance)
			if err != nil {
				return fmt.Errorf("bench: desktop %s: %w", d.name, err)
			}
			d.client = c
			return nil
		}
		if time.Now().After(deadline) {
			return fault.Unavailable("bench: desktop %s is recorded %s and the engine reports it %s, 10 s after a resume; want both running",
				d.name, in.State, st.Status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// frozen checks that d's container is paused now (recorded is what the pause answered).
func (r *runner) frozen(ctx context.Context, d *desktop, recorded string) error {
	st, err := r.cfg.Engine.InspectContainer(ctx, d.id)
	if err != nil {
		return err
	}
	if recorded != vm.StatePaused || !st.Paused {
		return fault.Unavailable("bench: desktop %s is not paused after a pause (recorded %s, the engine reports %s)", d.name, recorded, st.Status)
	}
	return nil
}

// openOwnLink opens a connection to d's driver next to the manager's link, over the same
// transport, without a heartbeat; the caller closes it.
func (r *runner) openOwnLink(ctx context.Context, d *desktop) (*guest.Client, error) {
	if r.fleet.m.LinkState(d.instance).Transport == link.NameExec {
		return r.openExecLink(ctx, d)
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.ReadyTimeout)
	defer cancel()
	conn, err := link.Socket{}.Open(wctx, link.Target{InstanceID: d.instance, Socket: r.fleet.m.SocketPath(d.instance)})
	if err != nil {
		return nil, fmt.Errorf("bench: socket link to %s: %w", d.name, err)
	}
	c, err := guest.NewClient(wctx, conn, guest.Options{Name: "desktop " + d.name + " (socket link)"})
	if err != nil {
		return nil, fmt.Errorf("bench: socket link to %s: %w", d.name, err)
	}
	return c, nil
}
