package control

import (
	"crypto/subtle"
	"fmt"
	"time"

	"cubicle/backend/fault"
)

// InputAuth is what every input message carries to prove it may act on a desktop.
type InputAuth struct {
	// AccountID is the account of the session the input came from.
	AccountID string
	// AgentID is the agent whose computer channel the input came through.
	AgentID string
	// Token and Version are the lease's, as granted by TakeOver or Switch.
	Token   string
	Version uint64
	// FrameID is the screen frame the input was aimed at; it must be non-zero.
	FrameID uint64
}

// TakeOver grants p control of desktopID: a fresh lease, valid for the lease TTL unless
// renewed. It is refused (fault.ErrConflict) while another person holds control, naming them,
// or while an agent task runs. The same person taking over again gets a fresh lease; the old
// token is dead from then on.
func (m *Manager) TakeOver(desktopID string, p Person) (Lease, error) {
	if desktopID == "" || p.AccountID == "" {
		return Lease{}, fault.Invalid("control: take over: a desktop and an account are required")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Lease{}, fmt.Errorf("control: take over %s: %w", desktopID, errClosed)
	}
	l, err := m.takeOverLocked(m.desktopLocked(desktopID), p, m.clock.Now())
	if err != nil {
		return Lease{}, fmt.Errorf("control: take over %s: %w", desktopID, err)
	}
	return l, nil
}

// takeOverLocked is TakeOver; the caller holds mu for writing.
func (m *Manager) takeOverLocked(d *desktop, p Person, now time.Time) (Lease, error) {
	m.settleLocked(d, now)
	if d.task != nil {
		return Lease{}, refuse(fault.ErrConflict, ReasonAgentRunning, d.task.Activity())
	}
	if l := d.person; l != nil {
		if l.holder.Person.AccountID != p.AccountID {
			return Lease{}, refuse(fault.ErrConflict, ReasonPersonControlling, l.holder.Activity())
		}
		m.endLeaseLocked(d, now, "", errStaleVersion) // the grant below bumps the version
	}
	d.version++
	h := Holder{Kind: HolderPerson, Person: p, Since: now, ExpiresAt: now.Add(m.ttl), Version: d.version}
	l := &lease{token: newToken(), holder: h, firstFrame: d.lastFrame.Load()}
	l.timer = m.clock.AfterFunc(m.ttl, m.poke)
	d.person = l
	m.emitLocked(Change{DesktopID: d.id, Kind: ChangeTaken, Holder: h, Version: h.Version,
		ExpiresAt: h.ExpiresAt, At: now})
	return l.public(d.id), nil
}

// Renew extends the lease token of desktopID by the lease TTL from now (the heartbeat). A
// lease that has ended, by expiry included, cannot be renewed: the refusal says why.
func (m *Manager) Renew(desktopID, token string) (Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Lease{}, fmt.Errorf("control: renew %s: %w", desktopID, errClosed)
	}
	d := m.desktops[desktopID]
	if d == nil {
		return Lease{}, fmt.Errorf("control: renew %s: %w", desktopID, errNotHolder)
	}
	now := m.clock.Now()
	m.settleLocked(d, now)
	l := d.person
	if l == nil || !tokenEqual(l.token, token) {
		return Lease{}, fmt.Errorf("control: renew %s: %w", desktopID, d.refusalLocked(token, ""))
	}
	l.holder.ExpiresAt = now.Add(m.ttl)
	l.timer.Stop()
	l.timer = m.clock.AfterFunc(m.ttl, m.poke)
	m.emitLocked(Change{DesktopID: d.id, Kind: ChangeRenewed, Holder: l.holder, Version: d.version,
		ExpiresAt: l.holder.ExpiresAt, At: now})
	return l.public(d.id), nil
}

// HandBack ends the lease token of desktopID. Handing back a lease that has already ended
// (handed back, expired, replaced or revoked) succeeds and changes nothing, so a client may
// retry; a token the desktop never granted is refused.
func (m *Manager) HandBack(desktopID, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("control: hand back %s: %w", desktopID, errClosed)
	}
	d := m.desktops[desktopID]
	if d == nil {
		return fmt.Errorf("control: hand back %s: %w", desktopID, errNotHolder)
	}
	now := m.clock.Now()
	m.settleLocked(d, now)
	if l := d.person; l != nil && tokenEqual(l.token, token) {
		m.endLeaseLocked(d, now, ChangeHandedBack, errHandedBack)
		return nil
	}
	if d.endedLocked(token) != nil {
		return nil
	}
	return fmt.Errorf("control: hand back %s: %w", desktopID, d.refusalLocked(token, ""))
}

// Switch moves p's control from one desktop to another (the dual desktop), atomically for
// every other caller: it first hands back fromToken on fromDesktop, then takes over toDesktop.
// If the take-over is refused, the hand back stands and the error says both. An empty
// fromDesktop or fromToken, or a lease that has already ended, means there is nothing to hand
// back. A fromToken held by another account is refused and nothing changes.
func (m *Manager) Switch(p Person, fromDesktop, fromToken, toDesktop string) (Lease, error) {
	if toDesktop == "" || p.AccountID == "" {
		return Lease{}, fault.Invalid("control: switch: a desktop and an account are required")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Lease{}, fmt.Errorf("control: switch to %s: %w", toDesktop, errClosed)
	}
	now := m.clock.Now()
	handedBack := false
	if d := m.desktops[fromDesktop]; d != nil && fromToken != "" && fromDesktop != toDesktop {
		m.settleLocked(d, now)
		if l := d.person; l != nil && tokenEqual(l.token, fromToken) {
			if l.holder.Person.AccountID != p.AccountID {
				return Lease{}, fmt.Errorf("control: switch from %s: %w", fromDesktop, errWrongAccount)
			}
			m.endLeaseLocked(d, now, ChangeHandedBack, errHandedBack)
			handedBack = true
		}
	}
	l, err := m.takeOverLocked(m.desktopLocked(toDesktop), p, now)
	if err != nil {
		if handedBack {
			return Lease{}, fmt.Errorf("control: switch: handed back %s, but could not take over %s: %w",
				fromDesktop, toDesktop, err)
		}
		return Lease{}, fmt.Errorf("control: switch to %s: %w", toDesktop, err)
	}
	return l, nil
}

// Revoke ends whatever control desktopID is under — a person's lease or an agent task — with
// ChangeRevoked, bumping the version, and forgets the newest frame id, since a restarted
// desktop's frame source counts from the start again. The VM manager calls it when the
// desktop is stopped, removed or recreated, or authorization is withdrawn, so that late input
// is fenced off. It reports whether anything ended.
func (m *Manager) Revoke(desktopID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.desktops[desktopID]
	if m.closed || d == nil {
		return false
	}
	now := m.clock.Now()
	m.settleLocked(d, now)
	d.lastFrame.Store(0)
	ended := false
	if d.person != nil {
		m.endLeaseLocked(d, now, ChangeRevoked, errRevoked)
		ended = true
	}
	if d.task != nil {
		h := *d.task
		d.task = nil
		d.version++
		m.emitLocked(Change{DesktopID: d.id, Kind: ChangeRevoked, Holder: h, Version: d.version, At: now})
		ended = true
	}
	return ended
}

// ObserveFrame records that frame frameID of desktopID's screen was sent to viewers. A lease
// accepts only input aimed at the newest frame observed at its grant or later. Frame ids must
// increase while the desktop runs; smaller ids than the newest are ignored until Revoke
// (called when the desktop stops or is recreated) starts the count afresh. It is cheap enough
// to call for every frame.
func (m *Manager) ObserveFrame(desktopID string, frameID uint64) {
	m.mu.RLock()
	d := m.desktops[desktopID]
	m.mu.RUnlock()
	if d == nil {
		m.mu.Lock()
		d = m.desktopLocked(desktopID)
		m.mu.Unlock()
	}
	// desktops are never removed from the map, so d stays valid without the lock.
	for {
		cur := d.lastFrame.Load()
		if frameID <= cur || d.lastFrame.CompareAndSwap(cur, frameID) {
			return
		}
	}
}

// CheckInput reports whether an input may act on desktopID: nil only when in carries the
// current lease's token and version, comes from the holder's account through the same
// agent's channel, the lease has not expired, and in.FrameID is non-zero and not older than
// the lease's first frame. Otherwise it returns a *RefusedError saying why (see Reason); it
// is returned unwrapped, ready to show. CheckInput takes only a read lock and does not
// allocate; it is the input hot path.
func (m *Manager) CheckInput(desktopID string, in InputAuth) error {
	if in.FrameID == 0 {
		return errNoFrame
	}
	now := m.clock.Now()
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return errClosed
	}
	d := m.desktops[desktopID]
	if d == nil {
		return errNotHolder
	}
	l := d.person
	if l == nil || !tokenEqual(l.token, in.Token) {
		return d.refusalLocked(in.Token, in.AccountID)
	}
	switch {
	case l.holder.Person.AccountID != in.AccountID:
		return errWrongAccount
	case l.holder.Person.AgentID != in.AgentID:
		return errWrongAgent
	case !now.Before(l.holder.ExpiresAt):
		return errExpired
	case in.Version != l.holder.Version:
		return errStaleVersion
	case in.FrameID < l.firstFrame:
		return errStaleFrame
	}
	return nil
}

// refusalLocked explains why token (from account, "" when unknown) is not d's current lease;
// the caller holds mu.
func (d *desktop) refusalLocked(token, account string) error {
	e := d.endedLocked(token)
	if e != nil && account != "" && e.account != account {
		return errWrongAccount
	}
	if account == "" && e != nil {
		account = e.account
	}
	if l := d.person; l != nil && (account == "" || l.holder.Person.AccountID != account) {
		return refuse(fault.ErrConflict, ReasonTakenByOther, "another person took control: "+l.holder.Activity())
	}
	if d.task != nil {
		return refuse(fault.ErrConflict, ReasonAgentRunning, d.task.Activity())
	}
	if e != nil {
		return e.why
	}
	return errNotHolder
}

// endedLocked returns the record of the ended lease token, or nil; the caller holds mu.
func (d *desktop) endedLocked(token string) *endedLease {
	if token == "" {
		return nil
	}
	for i := range d.ended {
		if d.ended[i].token != "" && tokenEqual(d.ended[i].token, token) {
			return &d.ended[i]
		}
	}
	return nil
}

// public returns the lease as handed to its holder.
func (l *lease) public(desktopID string) Lease {
	return Lease{DesktopID: desktopID, Token: l.token, Version: l.holder.Version, ExpiresAt: l.holder.ExpiresAt}
}

// tokenEqual compares tokens in constant time.
func tokenEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
