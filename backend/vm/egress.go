package vm

import (
	"context"
	"errors"
	"fmt"
)

// ReapplyEgress enforces the egress policy (Config.Egress) again on every running desktop of
// the node, after an administrator changed it. A desktop on which it fails is stopped, so none
// keeps running under a policy wider than the one saved. It returns what failed.
func (m *Manager) ReapplyEgress(ctx context.Context) error {
	eng := m.engine()
	if eng == nil || m.cfg.Egress == nil {
		return nil
	}
	var errs []error
	for _, in := range m.instancesOrNil() {
		if in.State != StateRunning || in.ContainerID == "" {
			continue
		}
		st, err := eng.InspectContainer(ctx, in.ContainerID)
		if err != nil || !st.Running && !st.Paused {
			continue // stopped meanwhile: its next start enforces the policy
		}
		pid := st.PID
		if in.HostWall != "on" {
			pid = 0 // never proven to be the desktop's process (see wall): its network is not touched
		}
		if err := m.cfg.Egress(ctx, in, pid); err != nil {
			errs = append(errs, fmt.Errorf("desktop %s: %w", in.ID, err))
			m.log.Error("stopping a desktop whose egress policy could not be enforced", "instance", in.ID, "err", err)
			if serr := m.StopInstance(context.WithoutCancel(ctx), in.ID, "egress policy not enforced"); serr != nil {
				m.log.Error("stop a desktop whose egress policy could not be enforced", "instance", in.ID, "err", serr)
			}
		}
	}
	return errors.Join(errs...)
}
