package fleet

import (
	"context"
	"strings"
	"time"

	"cubicle/backend/binding"
	"cubicle/backend/control"
	"cubicle/backend/liveview"
)

// ControlChanged keeps the desktop's node in step with a control change (SPEC §1.5): taking
// over or running a task ends the desktop's idle timer, handing back or finishing restarts it,
// and a lease that expires stops the desktop. It reports whether the desktop is a runner's,
// which is told over its link from a goroutine of the fleet (the control loop must not wait
// for a link); the host screen ("host-…") and a server without a Local VM change nothing.
func (f *Fleet) ControlChanged(c control.Change) (remote bool) {
	if f.cfg.Local == nil || strings.HasPrefix(c.DesktopID, "host-") { // the host screen has no instance
		return false
	}
	vms := f.Desktop(c.DesktopID)
	remote = vms.NodeID() != "local"
	if !remote && c.Kind != control.ChangeExpired {
		f.applyControlChange(vms, c) // the local node's marks do not wait
		return false
	}
	if !remote {
		vms.MarkIdle(c.DesktopID) // at once; the stop below follows
	}
	f.wg.Add(1)
	go func() { // not on the control loop: a runner's link, or a stop, takes a while
		defer f.wg.Done()
		f.applyControlChange(vms, c)
	}()
	return remote
}

// applyControlChange tells vms, the desktop's node, what control change c means for its idle
// timer (see ControlChanged); an expired lease also stops the desktop, which waits.
func (f *Fleet) applyControlChange(vms Node, c control.Change) {
	switch c.Kind {
	case control.ChangeTaken, control.ChangeTaskStarted:
		vms.MarkBusy(c.DesktopID, c.Holder.Activity())
	case control.ChangeHandedBack, control.ChangeTaskEnded, control.ChangeRevoked:
		vms.MarkIdle(c.DesktopID)
	case control.ChangeExpired:
		vms.MarkIdle(c.DesktopID)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := vms.StopInstance(ctx, c.DesktopID, "control lease expired"); err != nil {
			f.log.Warn("stop desktop after lease expiry", "desktop", c.DesktopID, "node", vms.NodeID(), "err", err)
		}
	}
}

// Controls is the control service as the computer channel and the chat's binder use it: a
// hand back and the end of an agent's task also clear the desktop's busy mark on its node
// before they return. The control loop tells the node too (ControlChanged), but a moment
// later — over a runner's link, after the person has their answer or the turn its end — and a
// Stop pressed in between was refused as "in use by" whoever had just let go. Marking idle
// twice is harmless.
type Controls struct {
	*control.Manager
	f *Fleet
}

// HandBack ends the lease (control.Manager.HandBack), then marks the desktop idle on its
// node unless someone took it meanwhile.
func (c Controls) HandBack(desktopID, token string) error {
	if err := c.Manager.HandBack(desktopID, token); err != nil {
		return err
	}
	c.idleUnlessHeld(desktopID)
	return nil
}

// EndTask ends an agent's task (control.Manager.EndTask), then marks the desktop idle on
// its node unless someone holds it meanwhile.
func (c Controls) EndTask(desktopID, taskID string) error {
	if err := c.Manager.EndTask(desktopID, taskID); err != nil {
		return err
	}
	c.idleUnlessHeld(desktopID)
	return nil
}

// idleUnlessHeld marks desktopID idle on its node when nobody holds its control.
func (c Controls) idleUnlessHeld(desktopID string) {
	if c.f.cfg.Local == nil || strings.HasPrefix(desktopID, "host-") {
		return
	}
	if _, held := c.Manager.Holder(desktopID); held {
		return // taken again (or a task holds it): its own change marks it busy
	}
	c.f.Desktop(desktopID).MarkIdle(desktopID)
}

var (
	_ liveview.Controls = Controls{}
	_ binding.Tasks     = Controls{}
)
