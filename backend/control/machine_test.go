package control_test

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"cubicle/backend/control"
	"cubicle/backend/fault"
)

// step is one operation of a state-machine case and what it must return.
type step struct {
	desc   string
	do     func(e *env) error
	class  error // nil: must succeed
	reason control.Reason
	msg    string // part of the error message
}

func take(label, desktop string, p control.Person) step {
	return step{desc: fmt.Sprintf("%s takes over %s as %s", p.Username, desktop, label), do: func(e *env) error {
		l, err := e.m.TakeOver(desktop, p)
		if err == nil {
			e.leases[label], e.owners[label] = l, p
		}
		return err
	}}
}

func renew(label string) step {
	return step{desc: "renew " + label, do: func(e *env) error {
		l, err := e.m.Renew(e.leases[label].DesktopID, e.leases[label].Token)
		if err == nil {
			if l.Token != e.leases[label].Token || l.Version != e.leases[label].Version {
				return fmt.Errorf("renew changed the lease: %+v → %+v", e.leases[label], l)
			}
			e.leases[label] = l
		}
		return err
	}}
}

func handBack(label string) step {
	return step{desc: "hand back " + label, do: func(e *env) error {
		return e.m.HandBack(e.leases[label].DesktopID, e.leases[label].Token)
	}}
}

func advance(d time.Duration) step {
	return step{desc: "advance " + d.String(), do: func(e *env) error { e.clock.Advance(d); return nil }}
}

// input checks an input of lease label, changed by mod.
func input(label string, mod func(*control.InputAuth)) step {
	return step{desc: "input on " + label, do: func(e *env) error {
		in := e.auth(label)
		if mod != nil {
			mod(&in)
		}
		return e.m.CheckInput(e.leases[label].DesktopID, in)
	}}
}

func begin(desktop string, a control.Agent) step {
	return step{desc: "begin " + a.TaskID + " on " + desktop, do: func(e *env) error { return e.m.BeginTask(desktop, a) }}
}

func end(desktop, task string) step {
	return step{desc: "end " + task + " on " + desktop, do: func(e *env) error { return e.m.EndTask(desktop, task) }}
}

// busy expects Busy(desktop) to name who ("" = not busy).
func busy(desktop, who string) step {
	return step{desc: "busy " + desktop, do: func(e *env) error {
		got, ok := e.m.Busy(desktop)
		if ok != (who != "") || got != who {
			return fmt.Errorf("Busy(%s) = %q, %v; want %q", desktop, got, ok, who)
		}
		return nil
	}}
}

func check(desc string, f func(e *env) error) step { return step{desc: desc, do: f} }

// fails sets what s must return.
func (s step) fails(class error, reason control.Reason, msg string) step {
	s.class, s.reason, s.msg = class, reason, msg
	return s
}

func TestStateMachine(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"take over grants a lease", []step{
			take("A", "d1", alice),
			check("lease fields", func(e *env) error {
				l := e.leases["A"]
				if _, err := hex.DecodeString(l.Token); err != nil || len(l.Token) != 32 {
					return fmt.Errorf("token %q is not 128-bit hex", l.Token)
				}
				if l.Version != 1 || !l.ExpiresAt.Equal(t0.Add(ttl)) || l.DesktopID != "d1" {
					return fmt.Errorf("lease = %+v", l)
				}
				return nil
			}),
			input("A", nil),
			busy("d1", "Alice"),
			check("holder", func(e *env) error {
				h, ok := e.m.Holder("d1")
				if !ok || h.Kind != control.HolderPerson || h.Person != alice || h.Version != 1 {
					return fmt.Errorf("Holder = %+v, %v", h, ok)
				}
				return nil
			}),
		}},
		{"another person is refused and told who", []step{
			take("A", "d1", alice),
			take("B", "d1", bob).fails(fault.ErrConflict, control.ReasonPersonControlling, "Alice is controlling this computer"),
			input("A", nil),
		}},
		{"same person takes over again: fresh lease, old token dead", []step{
			take("A", "d1", alice),
			take("A2", "d1", alice),
			check("new token and version", func(e *env) error {
				if e.leases["A2"].Token == e.leases["A"].Token || e.leases["A2"].Version != e.leases["A"].Version+1 {
					return fmt.Errorf("A = %+v, A2 = %+v", e.leases["A"], e.leases["A2"])
				}
				return nil
			}),
			input("A", nil).fails(fault.ErrConflict, control.ReasonStaleVersion, "stale version"),
			input("A2", nil),
			renew("A").fails(fault.ErrConflict, control.ReasonStaleVersion, "stale version"),
		}},
		{"current token with an old version", []step{
			take("A", "d1", alice),
			take("A2", "d1", alice),
			input("A2", func(in *control.InputAuth) { in.Version-- }).fails(fault.ErrConflict, control.ReasonStaleVersion, "stale version"),
		}},
		{"renew extends the lease", []step{
			take("A", "d1", alice),
			advance(20 * time.Second),
			renew("A"),
			check("expiry moved", func(e *env) error {
				if want := t0.Add(20*time.Second + ttl); !e.leases["A"].ExpiresAt.Equal(want) {
					return fmt.Errorf("ExpiresAt = %v, want %v", e.leases["A"].ExpiresAt, want)
				}
				return nil
			}),
			advance(20 * time.Second),
			input("A", nil),
			busy("d1", "Alice"),
			advance(10 * time.Second),
			input("A", nil).fails(fault.ErrConflict, control.ReasonExpired, "lease expired"),
			busy("d1", ""),
		}},
		{"renew after expiry is refused", []step{
			take("A", "d1", alice),
			advance(ttl),
			renew("A").fails(fault.ErrConflict, control.ReasonExpired, "lease expired"),
			input("A", nil).fails(fault.ErrConflict, control.ReasonExpired, "lease expired"),
		}},
		{"hand back ends the lease", []step{
			take("A", "d1", alice),
			handBack("A"),
			input("A", nil).fails(fault.ErrConflict, control.ReasonHandedBack, "control was handed back"),
			handBack("A"), // retry: no-op
			renew("A").fails(fault.ErrConflict, control.ReasonHandedBack, "control was handed back"),
			busy("d1", ""),
			take("B", "d1", bob),
			input("B", nil),
		}},
		{"after expiry another person may take over", []step{
			take("A", "d1", alice),
			advance(ttl + time.Second),
			take("B", "d1", bob),
			input("A", nil).fails(fault.ErrConflict, control.ReasonTakenByOther, "another person took control: Bob is controlling"),
			renew("A").fails(fault.ErrConflict, control.ReasonTakenByOther, "Bob"),
			input("B", nil),
		}},
		{"input from another account", []step{
			take("A", "d1", alice),
			input("A", func(in *control.InputAuth) { in.AccountID = bob.AccountID }).fails(fault.ErrForbidden, control.ReasonWrongAccount, "wrong account"),
		}},
		{"old token from another account", []step{
			take("A", "d1", alice),
			handBack("A"),
			input("A", func(in *control.InputAuth) { in.AccountID = bob.AccountID }).fails(fault.ErrForbidden, control.ReasonWrongAccount, "wrong account"),
		}},
		{"input through another agent's channel", []step{
			take("A", "d1", alice),
			input("A", func(in *control.InputAuth) { in.AgentID = "agent-2" }).fails(fault.ErrForbidden, control.ReasonWrongAgent, "wrong agent"),
		}},
		{"input without a frame", []step{
			take("A", "d1", alice),
			input("A", func(in *control.InputAuth) { in.FrameID = 0 }).fails(fault.ErrInvalid, control.ReasonNoFrame, "frame"),
		}},
		{"input aimed at a frame from before the lease", []step{
			check("frames seen", func(e *env) error {
				e.m.ObserveFrame("d1", 40)
				e.m.ObserveFrame("d1", 50)
				e.m.ObserveFrame("d1", 45) // late, ignored
				return nil
			}),
			take("A", "d1", alice),
			input("A", func(in *control.InputAuth) { in.FrameID = 49 }).fails(fault.ErrConflict, control.ReasonStaleFrame, "frame"),
			input("A", func(in *control.InputAuth) { in.FrameID = 50 }),
			input("A", func(in *control.InputAuth) { in.FrameID = 51 }),
		}},
		{"input with a made-up token", []step{
			take("A", "d1", alice),
			input("A", func(in *control.InputAuth) { in.Token = "00000000000000000000000000000000" }).fails(fault.ErrForbidden, control.ReasonNotHolder, "take over first"),
			input("A", func(in *control.InputAuth) { in.Token = "" }).fails(fault.ErrForbidden, control.ReasonNotHolder, ""),
		}},
		{"input on a desktop nobody took", []step{
			check("unknown desktop", func(e *env) error {
				return e.m.CheckInput("nowhere", control.InputAuth{AccountID: "x", Token: "t", Version: 1, FrameID: 1})
			}).fails(fault.ErrForbidden, control.ReasonNotHolder, "take over first"),
		}},
		{"an agent task blocks taking over", []step{
			begin("d1", researcher),
			busy("d1", "agent Researcher"),
			take("A", "d1", alice).fails(fault.ErrConflict, control.ReasonAgentRunning, "agent Researcher is running a task on this computer"),
			check("task may act", func(e *env) error { return e.m.CheckTask("d1", "task-1") }),
			end("d1", "task-1"),
			busy("d1", ""),
			check("ended task may not act", func(e *env) error { return e.m.CheckTask("d1", "task-1") }).fails(fault.ErrConflict, control.ReasonTaskEnded, ""),
			take("A", "d1", alice),
		}},
		{"a person blocks agent tasks", []step{
			take("A", "d1", alice),
			begin("d1", researcher).fails(fault.ErrConflict, control.ReasonPersonControlling, "a person is controlling this computer (Alice"),
			check("tool refused", func(e *env) error { return e.m.CheckTask("d1", "task-1") }).fails(fault.ErrConflict, control.ReasonPersonControlling, "a person is controlling this computer"),
			advance(ttl),
			begin("d1", researcher), // the lease expired
			input("A", nil).fails(fault.ErrConflict, control.ReasonAgentRunning, "agent Researcher"),
		}},
		{"one task at a time", []step{
			begin("d1", researcher),
			begin("d1", researcher), // the same task again: no-op
			begin("d1", control.Agent{AgentID: "agent-2", AgentName: "Writer", TaskID: "task-2"}).fails(fault.ErrConflict, control.ReasonAgentRunning, "agent Researcher"),
			end("d1", "task-2"), // not running: no-op
			busy("d1", "agent Researcher"),
		}},
		{"hand back with a token never granted", []step{
			take("A", "d1", alice),
			check("bogus", func(e *env) error { return e.m.HandBack("d1", "ffff") }).fails(fault.ErrConflict, control.ReasonTakenByOther, ""),
			handBack("A"),
			check("bogus on idle desktop", func(e *env) error { return e.m.HandBack("d1", "ffff") }).fails(fault.ErrForbidden, control.ReasonNotHolder, ""),
			check("unknown desktop", func(e *env) error { return e.m.HandBack("nowhere", "ffff") }).fails(fault.ErrForbidden, control.ReasonNotHolder, ""),
		}},
		{"revoke ends a lease and a task", []step{
			take("A", "d1", alice),
			check("revoke", func(e *env) error {
				if !e.m.Revoke("d1") {
					return fmt.Errorf("Revoke ended nothing")
				}
				return nil
			}),
			input("A", nil).fails(fault.ErrConflict, control.ReasonRevoked, "stopped or recreated"),
			begin("d1", researcher),
			check("revoke task", func(e *env) error {
				if !e.m.Revoke("d1") || e.m.Revoke("d1") {
					return fmt.Errorf("Revoke should end the task once")
				}
				return nil
			}),
			check("tool refused", func(e *env) error { return e.m.CheckTask("d1", "task-1") }).fails(fault.ErrConflict, control.ReasonTaskEnded, ""),
			end("d1", "task-1"),
		}},
		{"revoke restarts the frame count", []step{
			check("old desktop's frames", func(e *env) error { e.m.ObserveFrame("d1", 5000); return nil }),
			check("recreated", func(e *env) error { e.m.Revoke("d1"); e.m.ObserveFrame("d1", 3); return nil }),
			take("A", "d1", alice),
			input("A", func(in *control.InputAuth) { in.FrameID = 3 }),
			input("A", func(in *control.InputAuth) { in.FrameID = 2 }).fails(fault.ErrConflict, control.ReasonStaleFrame, ""),
		}},
		{"switch hands back the previous desktop", []step{
			take("A", "d1", alice),
			check("switch", func(e *env) error {
				l, err := e.m.Switch(alice, "d1", e.leases["A"].Token, "d2")
				e.leases["S"], e.owners["S"] = l, alice
				return err
			}),
			input("A", nil).fails(fault.ErrConflict, control.ReasonHandedBack, "handed back"),
			input("S", nil),
			busy("d1", ""),
			busy("d2", "Alice"),
		}},
		{"switch to a busy desktop still hands back", []step{
			take("B", "d2", bob),
			take("A", "d1", alice),
			check("switch", func(e *env) error {
				_, err := e.m.Switch(alice, "d1", e.leases["A"].Token, "d2")
				return err
			}).fails(fault.ErrConflict, control.ReasonPersonControlling, "handed back d1, but could not take over d2: Bob is controlling this computer"),
			input("A", nil).fails(fault.ErrConflict, control.ReasonHandedBack, ""),
			busy("d1", ""),
			input("B", nil),
		}},
		{"switch with another account's token changes nothing", []step{
			take("B", "d1", bob),
			check("switch", func(e *env) error {
				_, err := e.m.Switch(alice, "d1", e.leases["B"].Token, "d2")
				return err
			}).fails(fault.ErrForbidden, control.ReasonWrongAccount, ""),
			input("B", nil),
			busy("d2", ""),
		}},
		{"switch from an ended lease just takes over", []step{
			take("A", "d1", alice),
			advance(ttl),
			check("switch", func(e *env) error {
				_, err := e.m.Switch(alice, "d1", e.leases["A"].Token, "d2")
				return err
			}),
			busy("d2", "Alice"),
		}},
		{"invalid arguments", []step{
			check("no desktop", func(e *env) error { _, err := e.m.TakeOver("", alice); return err }).fails(fault.ErrInvalid, "", ""),
			check("no account", func(e *env) error { _, err := e.m.TakeOver("d1", control.Person{}); return err }).fails(fault.ErrInvalid, "", ""),
			check("no task", func(e *env) error { return e.m.BeginTask("d1", control.Agent{}) }).fails(fault.ErrInvalid, "", ""),
			check("switch nowhere", func(e *env) error { _, err := e.m.Switch(alice, "", "", ""); return err }).fails(fault.ErrInvalid, "", ""),
		}},
		{"after Close everything is refused", []step{
			take("A", "d1", alice),
			check("close", func(e *env) error { return e.m.Close() }),
			input("A", nil).fails(fault.ErrUnavailable, control.ReasonClosed, "shut down"),
			take("B", "d2", bob).fails(fault.ErrUnavailable, control.ReasonClosed, ""),
			renew("A").fails(fault.ErrUnavailable, control.ReasonClosed, ""),
			handBack("A").fails(fault.ErrUnavailable, control.ReasonClosed, ""),
			begin("d1", researcher).fails(fault.ErrUnavailable, control.ReasonClosed, ""),
			busy("d1", ""),
			check("start", func(e *env) error { return e.m.Start(t.Context()) }).fails(fault.ErrUnavailable, control.ReasonClosed, ""),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			for i, s := range tt.steps {
				err := s.do(e)
				t.Logf("step %d: %s → %v", i, s.desc, err)
				checkRefusal(t, err, s.class, s.reason, s.msg)
			}
		})
	}
}
