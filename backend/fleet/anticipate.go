package fleet

import (
	"context"
	"errors"
	"fmt"

	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/vm"
)

// Anticipatory start (issue 25 item 2). When a person opens an agent whose desktop is
// stopped, the web client says so (POST /api/app/agents/:id/opened) and the desktop starts at
// once — when the agent's next turn would use its Local VM and a capacity slot is free (never
// taking one another desktop holds: the node's capacity check refuses, and VMReady is asked
// first), so that it is usually ready before the person's first message is sent. Nothing else
// changes: the desktop idles out as usual when nothing uses it, and a turn that starts
// meanwhile waits in the desktop's queue for the same start.

// Anticipate implements api.Computers: it starts agentID's desktop when its next turn would
// use one and one can start now, and says what it did.
func (c *Computers) Anticipate(ctx context.Context, accountID, agentID string) (Anticipation, error) {
	a, err := c.f.cfg.Store.Agent(agentID)
	if err != nil || a.AccountID != accountID {
		return Anticipation{}, fault.NotFound("agent %q not found", agentID)
	}
	p := c.Decide(ctx, a, false)
	if p.Kind != computer.VM {
		why := fmt.Sprintf("the agent's next turn uses %s, not a Local VM", p.Kind.Label())
		if p.Reason != "" {
			why += " (" + p.Reason + ")"
		}
		return Anticipation{Why: why}, nil
	}
	vms, err := c.f.AgentNode(a.ID)
	if err != nil {
		return Anticipation{}, err
	}
	v, err := vms.Agent(ctx, accountID, agentID)
	if err != nil {
		return Anticipation{}, err
	}
	switch st := v.Desktop.State; st {
	case vm.StateStopped:
	case vm.StateAbsent, "":
		// Never made (or removed): creating one makes its volumes, which a person does
		// (Create) or the agent's first turn that uses it; opening the chat does not.
		return Anticipation{State: vm.StateAbsent, Why: "the agent has no desktop yet: it is created by Create or by the first turn that uses it"}, nil
	default:
		return Anticipation{State: st, Why: "the desktop is " + st}, nil
	}
	if ok, why := vms.VMReady(ctx, accountID, agentID); !ok {
		return Anticipation{State: v.Desktop.State, Why: why}, nil
	}
	c.f.log.Info("starting the desktop of an agent a person opened", "agent", agentID)
	v, err = vms.Act(ctx, accountID, agentID, vm.ActionStart)
	if errors.Is(err, fault.ErrConflict) {
		// Taken meanwhile (the last slot, a person's action): not started, and no error.
		return Anticipation{Why: err.Error()}, nil
	}
	if err != nil {
		return Anticipation{}, err
	}
	return Anticipation{Started: true, State: v.Desktop.State}, nil
}
