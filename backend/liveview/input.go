package liveview

import (
	"context"
	"fmt"
	"time"

	"cubicle/backend/control"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// This file handles the computer channel's client messages: take over, hand back, inputs
// (checked against the control lease before they reach the driver) and refresh requests.

// handle acts on one client message and returns the reply (nil for none).
func (k *conn) handle(m *clientMsg) any {
	d := k.current()
	person := control.Person{AccountID: k.p.AccountID, Username: k.p.Username, AgentID: k.agentID}
	refused := func(err error) any {
		word := fault.Code(err)
		reason := string(control.ReasonOf(err))
		if reason == "" {
			reason = word // e.g. "invalid" for an input the driver refused
		}
		return errorJSON{Type: "error", ID: m.ID, Op: m.Type, Reason: reason, Code: word, Message: err.Error()}
	}
	notRunning := func() any {
		msg := "this agent has no desktop yet; create one from the computer panel"
		if d.ID != "" {
			msg = "the desktop is " + d.State + "; start it first"
		}
		return errorJSON{Type: "error", ID: m.ID, Op: m.Type, Reason: reasonNotRunning, Code: "conflict", Message: msg}
	}
	leased := func(l control.Lease) any {
		k.mu.Lock()
		k.leaseVer = l.Version // the desktop's clipboard goes to this connection only
		k.mu.Unlock()
		k.wake() // status changes now, whether or not control changes are wired to the channel
		ttl := time.Until(l.ExpiresAt)
		return leaseJSON{Type: "lease", ID: m.ID, Op: m.Type, DesktopID: l.DesktopID, Token: l.Token,
			Version: l.Version, ExpiresAt: l.ExpiresAt.UTC(), RenewInSeconds: (ttl / 3).Seconds()}
	}
	switch m.Type {
	case "take_over":
		if d.ID == "" || d.State != "running" {
			return notRunning()
		}
		l, err := k.ch.cfg.Control.TakeOver(d.ID, person)
		if err != nil {
			return refused(err)
		}
		k.ch.log.Info("computer: take over", "desktop", d.ID, "agent", k.agentID, "user", k.p.Username)
		return leased(l)
	case "renew":
		if d.ID == "" {
			return notRunning()
		}
		l, err := k.ch.cfg.Control.Renew(d.ID, m.Token)
		if err != nil {
			return refused(err)
		}
		return leased(l)
	case "hand_back":
		if d.ID == "" {
			return notRunning()
		}
		if err := k.ch.cfg.Control.HandBack(d.ID, m.Token); err != nil {
			return refused(err)
		}
		k.wake()
		k.ch.log.Info("computer: hand back", "desktop", d.ID, "agent", k.agentID, "user", k.p.Username)
		return okJSON{Type: "ok", ID: m.ID, Op: m.Type}
	case "switch":
		if d.ID == "" || d.State != "running" {
			return notRunning()
		}
		from := ""
		if m.FromAgentID != "" {
			if k.p.Owns == nil {
				return refused(fault.Forbidden("switching from another agent is not offered here"))
			}
			if err := k.p.Owns(m.FromAgentID); err != nil {
				return refused(err)
			}
			ctx, cancel := context.WithTimeout(k.ctx, 5*time.Second)
			fd, err := k.ch.cfg.Desktops.Desktop(ctx, k.p.AccountID, m.FromAgentID)
			cancel()
			if err != nil {
				return refused(err)
			}
			from = fd.ID
		}
		l, err := k.ch.cfg.Control.Switch(person, from, m.FromToken, d.ID)
		if err != nil {
			return refused(err)
		}
		k.ch.log.Info("computer: switch", "from", from, "to", d.ID, "agent", k.agentID, "user", k.p.Username)
		return leased(l)
	case "input":
		return k.input(m, d, refused, notRunning)
	case "clipboard_set", "clipboard_get", "resize":
		return k.desktopOp(m, d, refused, notRunning)
	case "refresh":
		// A version 2 client lost track of its screen: a keyframe comes (frames are whole
		// anyway in version 1).
		k.mu.Lock()
		rv := k.rviewer
		k.mu.Unlock()
		if rv != nil {
			rv.Refresh()
		}
		return okJSON{Type: "ok", ID: m.ID, Op: m.Type}
	}
	return errorJSON{Type: "error", ID: m.ID, Op: m.Type, Reason: reasonBadMessage, Code: "invalid",
		Message: fmt.Sprintf("unknown message type %q; use take_over, renew, hand_back, switch, input, clipboard_set, clipboard_get, resize or refresh", m.Type)}
}

// input checks one input against the lease and the frames this connection was sent, then
// performs it.
func (k *conn) input(m *clientMsg, d Desktop, refused func(error) any, notRunning func() any) any {
	if r := k.checkLease(m, d, "input", refused, notRunning); r != nil {
		return r
	}
	ctx, cancel := context.WithTimeout(k.ctx, 10*time.Second)
	defer cancel()
	err := d.Client.Input(ctx, guest.Input{Action: m.Action, X: m.X, Y: m.Y, ToX: m.ToX, ToY: m.ToY,
		Button: m.Button, DeltaX: m.DeltaX, DeltaY: m.DeltaY, Keys: m.Keys, Text: m.Text})
	if err != nil {
		return refused(err)
	}
	if m.ID == "" {
		return nil
	}
	return okJSON{Type: "ok", ID: m.ID, Op: m.Type}
}

// checkLease lets m through (nil) only when d runs, m carries this connection's control
// lease and names a frame this connection was sent; otherwise it returns the refusal. Input,
// clipboard and resize messages all pass it; what names the message in the refusal.
func (k *conn) checkLease(m *clientMsg, d Desktop, what string, refused func(error) any, notRunning func() any) any {
	if d.ID == "" || d.State != "running" || d.Client == nil {
		return notRunning()
	}
	k.mu.Lock()
	newest := k.lastFrame
	k.mu.Unlock()
	if m.FrameID > newest {
		return errorJSON{Type: "error", ID: m.ID, Op: m.Type, Reason: reasonUnknownFrame, Code: "invalid",
			Message: what + " names a screen frame this connection was never sent; aim at a frame you received"}
	}
	if err := k.ch.cfg.Control.CheckInput(d.ID, control.InputAuth{AccountID: k.p.AccountID, AgentID: k.agentID,
		Token: m.Token, Version: m.Version, FrameID: m.FrameID}); err != nil {
		return refused(err)
	}
	return nil
}
