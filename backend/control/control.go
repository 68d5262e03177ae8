// Package control decides who operates a desktop: a person who took over through the
// computer panel, or an agent task. It hands out control leases and fences late input.
//
// One Manager serves every desktop of the process, keyed by desktop (instance) id. Per
// desktop there is at most one holder:
//
//	        TakeOver                   HandBack, expiry, Revoke
//	idle ────────────▶ person lease ──────────────────────────▶ idle
//	                   (Renew extends it; TakeOver by the same person replaces it)
//	        BeginTask                  EndTask, Revoke
//	idle ────────────▶ agent task ────────────────────────────▶ idle
//
// A person's lease is {Token, Version, ExpiresAt}. Every grant and every end (hand back,
// expiry, revoke, task start and end) bumps the desktop's version, which never goes back, so
// an input carrying an old token or version is refused with a Reason (fencing, DESIGN data
// flow 4). CheckInput also binds an input to the holder's account and agent and to a screen
// frame no older than the first frame of the lease (see ObserveFrame).
//
// Expiry is enforced twice: lazily, by comparing the clock with ExpiresAt on every call, so
// fencing never depends on a timer having fired; and actively, by a per-lease timer that wakes
// the Manager's loop to end the lease and announce it.
//
// Changes are announced through Config.OnChange, called from the Manager's loop goroutine
// outside every lock, one at a time, in the order they happened (so per desktop in version
// order). The VM manager restarts its idle timer on ChangeHandedBack and ChangeTaskEnded and
// stops the desktop on ChangeExpired (SPEC §1.5: expiry of a running lease stops the instance
// even with auto-stop "Never"); the computer channel sends status on each.
//
// A Manager is safe for concurrent use. Errors wrap fault classes: refusals are
// *RefusedError (see ReasonOf) of class fault.ErrConflict (wrong state), fault.ErrForbidden
// (not yours), fault.ErrInvalid (malformed) or fault.ErrUnavailable (closed).
package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cubicle/backend/fault"
)

// DefaultLeaseTTL is how long a lease lasts without a heartbeat.
const DefaultLeaseTTL = 30 * time.Second

// endedHistory is how many ended leases per desktop are remembered, to say why a late input
// is refused ("handed back", "expired", …) rather than only that it is.
const endedHistory = 8

// Config configures a Manager. Every field is optional.
type Config struct {
	// Clock is the time source; nil means SystemClock.
	Clock Clock
	// LeaseTTL is how long a lease lasts after its grant or last Renew; ≤0 means
	// DefaultLeaseTTL. Clients should heartbeat at about a third of it.
	LeaseTTL time.Duration
	// Logger receives every change (renewals at debug level); nil discards.
	Logger *slog.Logger
	// OnChange, if set, is called for every change, from the Manager's loop goroutine, one
	// call at a time, in order. It may call the Manager, except Close (which waits for it). A
	// slow OnChange delays later changes (and Close) but never fencing.
	OnChange func(Change)
}

// Person is someone taking over a desktop from a computer panel.
type Person struct {
	// AccountID is the person's account; required.
	AccountID string
	// Username names the person in messages to others ("Alice is controlling this computer").
	Username string
	// AgentID is the agent whose computer channel control was taken through. Inputs must come
	// through the same agent's channel (a shared desktop is visible from several agents).
	AgentID string
}

// Agent is an agent task operating a desktop through its computer tools.
type Agent struct {
	// AgentID identifies the agent.
	AgentID string
	// AgentName names it in messages ("agent Researcher is running a task on this computer").
	AgentName string
	// TaskID identifies the task (one chat turn); required.
	TaskID string
}

// HolderKind says what kind of holder a Holder is.
type HolderKind string

// The holder kinds.
const (
	HolderPerson HolderKind = "person"
	HolderAgent  HolderKind = "agent"
)

// Holder is who operates a desktop.
type Holder struct {
	// Kind selects Person or Agent.
	Kind HolderKind
	// Person is set when Kind is HolderPerson.
	Person Person
	// Agent is set when Kind is HolderAgent.
	Agent Agent
	// Since is when control was granted or the task began.
	Since time.Time
	// ExpiresAt is when a person's lease ends unless renewed; zero for tasks.
	ExpiresAt time.Time
	// Version is the desktop's version at the grant.
	Version uint64
}

// Name names the holder for people: the username, or "agent <name>".
func (h Holder) Name() string {
	if h.Kind == HolderAgent {
		name := h.Agent.AgentName
		if name == "" {
			name = h.Agent.AgentID
		}
		return "agent " + name
	}
	if h.Person.Username != "" {
		return h.Person.Username
	}
	return "another person"
}

// Activity is a sentence for people saying what the holder does, e.g. "Alice is controlling
// this computer" or "agent Researcher is running a task on this computer".
func (h Holder) Activity() string {
	if h.Kind == HolderAgent {
		return h.Name() + " is running a task on this computer"
	}
	return h.Name() + " is controlling this computer"
}

// Lease is a person's control of one desktop. Every input must carry Token and Version.
type Lease struct {
	// DesktopID is the desktop the lease is for.
	DesktopID string
	// Token is a random 128-bit secret, hex encoded.
	Token string
	// Version is the desktop's version at the grant.
	Version uint64
	// ExpiresAt is when the lease ends unless renewed.
	ExpiresAt time.Time
}

// ChangeKind says what changed.
type ChangeKind string

// The change kinds.
const (
	ChangeTaken       ChangeKind = "taken"
	ChangeRenewed     ChangeKind = "renewed"
	ChangeHandedBack  ChangeKind = "handed_back"
	ChangeExpired     ChangeKind = "expired"
	ChangeRevoked     ChangeKind = "revoked"
	ChangeTaskStarted ChangeKind = "task_started"
	ChangeTaskEnded   ChangeKind = "task_ended"
)

// Change is one change of a desktop's control, as passed to Config.OnChange.
type Change struct {
	// DesktopID is the desktop that changed.
	DesktopID string
	// Kind is what happened.
	Kind ChangeKind
	// Holder is the holder the change is about: the new one for taken/renewed/task_started,
	// the former one for the ends.
	Holder Holder
	// Version is the desktop's version after the change.
	Version uint64
	// ExpiresAt is the lease's expiry for taken and renewed; zero otherwise.
	ExpiresAt time.Time
	// At is when the change happened, by the Manager's clock.
	At time.Time
}

// Manager holds the control state of every desktop. Create it with New, run it with Start,
// stop it with Close.
type Manager struct {
	clock    Clock
	ttl      time.Duration
	log      *slog.Logger
	onChange func(Change)

	wake   chan struct{} // a lease timer fired; capacity 1
	notify chan struct{} // changes are queued; capacity 1
	wg     sync.WaitGroup

	mu       sync.RWMutex
	desktops map[string]*desktop // guarded by mu
	started  bool                // guarded by mu
	closed   bool                // guarded by mu
	cancel   context.CancelFunc  // guarded by mu

	qmu   sync.Mutex // lock order: mu before qmu
	queue []Change   // guarded by qmu
}

// desktop is one desktop's control state. All fields but lastFrame are guarded by Manager.mu.
type desktop struct {
	id      string
	version uint64
	person  *lease // the person holding control, or nil
	task    *Holder
	ended   [endedHistory]endedLease // ring of recently ended leases
	next    int                      // next slot of ended
	// lastFrame is the newest frame id seen (ObserveFrame); atomic so the frame path only
	// needs the read lock.
	lastFrame atomic.Uint64
}

// lease is a person's current lease.
type lease struct {
	token      string
	version    uint64
	holder     Holder
	firstFrame uint64
	timer      Timer
}

// endedLease remembers how a lease ended.
type endedLease struct {
	token   string
	account string
	why     error
}

// New returns a Manager configured by cfg. Call Start to run expiry and notifications.
func New(cfg Config) *Manager {
	m := &Manager{
		clock:    cfg.Clock,
		ttl:      cfg.LeaseTTL,
		log:      cfg.Logger,
		onChange: cfg.OnChange,
		wake:     make(chan struct{}, 1),
		notify:   make(chan struct{}, 1),
		desktops: make(map[string]*desktop),
	}
	if m.clock == nil {
		m.clock = SystemClock{}
	}
	if m.ttl <= 0 {
		m.ttl = DefaultLeaseTTL
	}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return m
}

// Start runs the Manager's loop until ctx is cancelled or Close is called. Leases granted
// before Start are fenced lazily and their changes are delivered once the loop runs. Once the
// loop has stopped, leases are still fenced lazily but no change is announced; Close must be
// called all the same.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	if m.started {
		return fault.Conflict("control: already started")
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(ctx)
	m.wg.Add(1)
	go m.run(ctx)
	return nil
}

// Close stops every lease timer and the loop, delivers the changes already queued, and waits
// for the loop to end. Afterwards operations fail with ReasonClosed. Close is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		for _, d := range m.desktops {
			if d.person != nil && d.person.timer != nil {
				d.person.timer.Stop()
				d.person.timer = nil
			}
		}
		if m.cancel != nil {
			m.cancel()
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// run is the Manager's loop: it ends leases whose timers fired and delivers changes.
func (m *Manager) run(ctx context.Context) {
	defer m.wg.Done()
	m.expireDue()
	m.deliver()
	for {
		select {
		case <-ctx.Done():
			m.deliver()
			return
		case <-m.wake:
			m.expireDue()
			m.deliver()
		case <-m.notify:
			m.deliver()
		}
	}
}

// poke is every lease timer's function: it only signals the loop, so it never blocks.
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// expireDue ends every lease whose time is up.
func (m *Manager) expireDue() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	now := m.clock.Now()
	for _, d := range m.desktops {
		m.settleLocked(d, now)
	}
}

// deliver passes the queued changes to OnChange, outside every lock.
func (m *Manager) deliver() {
	for {
		m.qmu.Lock()
		batch := m.queue
		m.queue = nil
		m.qmu.Unlock()
		if len(batch) == 0 {
			return
		}
		for _, c := range batch {
			m.onChange(c)
		}
	}
}

// emitLocked queues a change; the caller holds mu, which keeps the queue in version order.
func (m *Manager) emitLocked(c Change) {
	level := slog.LevelInfo
	if c.Kind == ChangeRenewed { // every heartbeat
		level = slog.LevelDebug
	}
	m.log.Log(context.Background(), level, "control change", "desktop", c.DesktopID,
		"kind", string(c.Kind), "holder", c.Holder.Name(), "version", c.Version)
	if m.onChange == nil {
		return
	}
	m.qmu.Lock()
	m.queue = append(m.queue, c)
	m.qmu.Unlock()
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// desktopLocked returns the state of desktop id, creating it; the caller holds mu for writing.
func (m *Manager) desktopLocked(id string) *desktop {
	d := m.desktops[id]
	if d == nil {
		d = &desktop{id: id}
		m.desktops[id] = d
	}
	return d
}

// settleLocked ends d's lease if its time is up; the caller holds mu for writing.
func (m *Manager) settleLocked(d *desktop, now time.Time) {
	if d.person != nil && !now.Before(d.person.holder.ExpiresAt) {
		m.endLeaseLocked(d, now, ChangeExpired, errExpired)
	}
}

// endLeaseLocked ends d's lease, remembers why, bumps the version and announces kind (none
// when kind is ""); the caller holds mu for writing.
func (m *Manager) endLeaseLocked(d *desktop, now time.Time, kind ChangeKind, why error) {
	l := d.person
	if l.timer != nil {
		l.timer.Stop()
	}
	d.person = nil
	d.ended[d.next] = endedLease{token: l.token, account: l.holder.Person.AccountID, why: why}
	d.next = (d.next + 1) % endedHistory
	if kind == "" {
		return
	}
	d.version++
	m.emitLocked(Change{DesktopID: d.id, Kind: kind, Holder: l.holder, Version: d.version, At: now})
}

// newToken returns 128 random bits in hex.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails; it crashes the program instead
	return hex.EncodeToString(b[:])
}
