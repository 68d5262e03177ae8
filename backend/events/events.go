// Package events is Cubicle's typed event bus (the shape of syncthing's lib/events): services
// publish what happened — a desktop changed state, an image preparation progressed, control
// of a desktop changed hands, a tool run was recorded, a runner connected — and subscribers
// (the UI's event stream, the Wails window through the same stream, the computer channel's
// status) receive it as it happens instead of polling.
//
// Ownership and concurrency. One owner goroutine, started by New and stopped by Close, holds
// every subscription. Publish hands an event to the owner through a bounded queue (blocking
// only while the owner catches up, never on a subscriber); the owner numbers the event, keeps
// it in a ring of recent events and copies it into the buffer of every subscription whose
// filter takes it, never waiting: a subscription whose buffer is full loses the event and is
// marked lagged (Subscription.Lagged), so one slow reader can never hold up the publisher or
// the other readers. A lagged reader resynchronises by reading the state afresh (the UI
// refetches). Subscribe is synchronous: every event published after it returns is offered to
// the new subscription, and with SubscribeOptions.Since the events after that id still in the
// ring are replayed first (a reconnecting stream misses nothing, or learns that it did).
//
// All methods are safe for concurrent use. Publish and Subscribe after Close do nothing
// (Subscribe returns a closed subscription).
package events

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Type names a kind of event. The payload of each type is the struct named in its comment.
type Type string

// The event types.
const (
	// DesktopState: a desktop (instance) changed state — Desktop.
	DesktopState Type = "desktop.state"
	// DesktopStats: CPU and memory of the running desktops — Stats. Administrators only.
	DesktopStats Type = "desktop.stats"
	// PrepareProgress: an image preparation progressed or ended — Prepare. Administrators only.
	PrepareProgress Type = "prepare.progress"
	// ImagesChanged: the node's prepared images changed — Images.
	ImagesChanged Type = "images.changed"
	// ControlChanged: control of a desktop was taken, renewed, handed back, expired, revoked,
	// or an agent task began or ended on it — Control.
	ControlChanged Type = "control.changed"
	// TimelineEntry: a tool run was recorded or finished — Timeline.
	TimelineEntry Type = "timeline.entry"
	// AgentChanged: an agent was created, changed (name, computer, settings) or deleted — Agent.
	AgentChanged Type = "agent.changed"
	// NodeChanged: an execution node's settings changed (isolation, capacity, idle policy,
	// host screen control) — Node.
	NodeChanged Type = "node.changed"
	// RunnerStatus: an execution node (runner) connected, disconnected or changed — Runner.
	// Administrators only.
	RunnerStatus Type = "runner.status"
	// DesktopEgressBlocked: a desktop's egress policy refused a connection or a name —
	// EgressBlocked.
	DesktopEgressBlocked Type = "desktop.egress_blocked"
	// ConfirmRequested: a tool call made from outside a chat (an MCP client using an agent's
	// computer) waits for the owner's confirmation, or that wait ended — Confirm.
	ConfirmRequested Type = "chat.confirm"
)

// Types lists every event type.
func Types() []Type {
	return []Type{DesktopState, DesktopStats, PrepareProgress, ImagesChanged, ControlChanged, TimelineEntry,
		AgentChanged, NodeChanged, RunnerStatus, DesktopEgressBlocked, ConfirmRequested}
}

// Audience says who may read an event on the UI's stream. Services inside the process (the
// computer channel) read every event whatever its audience.
type Audience struct {
	// Account is the account the event is about: its signed-in sessions see it ("" = none).
	Account string
	// Admins: administrators see it too.
	Admins bool
	// Everyone: every signed-in account sees it (it carries nothing private).
	Everyone bool
}

// ForAccount is the audience of an event about one account's own things; administrators see
// it when admins is set (they manage every desktop, but not other accounts' chats).
func ForAccount(account string, admins bool) Audience {
	return Audience{Account: account, Admins: admins}
}

// AdminsOnly is the audience of an event for administrators only.
var AdminsOnly = Audience{Admins: true}

// Everyone is the audience of an event every signed-in account may see.
var Everyone = Audience{Everyone: true}

// Viewer is who reads a stream: an account, and whether it is an administrator.
type Viewer struct {
	Account string
	Admin   bool
}

// Sees reports whether v may read an event with audience a.
func (a Audience) Sees(v Viewer) bool {
	return a.Everyone || (a.Admins && v.Admin) || (a.Account != "" && a.Account == v.Account)
}

// Event is one thing that happened. ID and Time are set by the bus.
type Event struct {
	// ID numbers the events of one bus from 1 upwards, in publishing order.
	ID   uint64
	Type Type
	Time time.Time
	// Data is the payload: the struct the Type's comment names, as a value.
	Data     any
	Audience Audience
}

// Config configures a Bus. Every field is optional.
type Config struct {
	Logger *slog.Logger
	// Queue is the length of the publishing queue; 0 = 1024.
	Queue int
	// History is how many recent events are kept for replay (SubscribeOptions.Since); 0 = 1024.
	History int
}

// Bus is the event bus. Create it with New; Close stops it.
type Bus struct {
	log     *slog.Logger
	epoch   string
	history int

	in    chan Event
	subs  chan subRequest
	unsub chan subRequest
	stop  chan struct{}
	done  chan struct{}

	lastID    atomic.Uint64
	closeOnce sync.Once

	mu     sync.RWMutex               // guards live
	live   map[*Subscription]struct{} // every subscription, for WatchingFor; guarded by mu
	closed chan struct{}              // closed by Close before the owner stops: Publish and Subscribe give up
}

type subRequest struct {
	s   *Subscription
	ack chan struct{}
}

// New starts a bus: its owner goroutine runs until Close.
func New(cfg Config) *Bus {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	if cfg.History <= 0 {
		cfg.History = 1024
	}
	var nonce [6]byte
	rand.Read(nonce[:])
	b := &Bus{
		log: cfg.Logger, epoch: hex.EncodeToString(nonce[:]), history: cfg.History,
		in: make(chan Event, cfg.Queue), subs: make(chan subRequest), unsub: make(chan subRequest),
		stop: make(chan struct{}), done: make(chan struct{}), closed: make(chan struct{}),
		live: map[*Subscription]struct{}{},
	}
	go b.run()
	return b
}

// Epoch identifies this bus among restarts: event ids count from 1 again in a new process,
// so a reader resuming from an id checks that the epoch is the same.
func (b *Bus) Epoch() string { return b.epoch }

// LastID is the id of the newest event numbered so far (0 before the first).
func (b *Bus) LastID() uint64 { return b.lastID.Load() }

// Publish sends an event of type t with payload data to the subscribers that take it. It
// returns once the owner has the event queued; it never waits for a subscriber.
func (b *Bus) Publish(t Type, aud Audience, data any) {
	select {
	case <-b.closed:
		return
	default:
	}
	select {
	case b.in <- Event{Type: t, Data: data, Audience: aud}:
	case <-b.closed:
	}
}

// WatchingFor reports whether some subscription would receive an event of type t published
// for aud (its type filter takes t and its viewer, if any, sees aud), so that a publisher can
// skip work nobody may read: the CPU and memory sampler runs only while an administrator's
// stream (or an in-process reader) is open, not for a member's page.
func (b *Bus) WatchingFor(t Type, aud Audience) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	e := Event{Type: t, Audience: aud}
	for s := range b.live {
		if s.takes(e) {
			return true
		}
	}
	return false
}

// Close stops the owner and closes every subscription's channel. It is idempotent and
// returns after the owner has stopped.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		close(b.closed)
		close(b.stop)
	})
	<-b.done
	return nil
}

// SubscribeOptions choose what a subscription receives.
type SubscribeOptions struct {
	// Types are the event types to receive; nil = every type.
	Types []Type
	// Viewer, when set, keeps only the events its account may see (Audience.Sees); nil
	// receives every event (services inside the process).
	Viewer *Viewer
	// Since replays the events after this id still held by the bus before new ones; 0 = no
	// replay. When the bus no longer holds every event after Since, the subscription starts
	// lagged.
	Since uint64
	// Buffer is how many undelivered events the subscription holds before it loses events;
	// 0 = 256.
	Buffer int
}

// Subscription is one reader's view of the bus. Read events from C until it is closed (by
// Close or the bus's Close).
type Subscription struct {
	bus    *Bus
	types  []Type // nil = all
	viewer *Viewer
	since  uint64
	ch     chan Event
	lagged atomic.Bool
	once   sync.Once
}

// Subscribe adds a subscription. Every event published after it returns is offered to it.
func (b *Bus) Subscribe(o SubscribeOptions) *Subscription {
	if o.Buffer <= 0 {
		o.Buffer = 256
	}
	s := &Subscription{bus: b, types: slices.Clone(o.Types), viewer: o.Viewer, since: o.Since, ch: make(chan Event, o.Buffer)}
	if o.Viewer != nil {
		v := *o.Viewer
		s.viewer = &v
	}
	req := subRequest{s: s, ack: make(chan struct{})}
	select {
	case b.subs <- req:
		<-req.ack
	case <-b.closed:
		close(s.ch)
	}
	return s
}

// C is the subscription's events, in publishing order. It is closed when the subscription
// or the bus is closed.
func (s *Subscription) C() <-chan Event { return s.ch }

// Lagged reports whether events were lost since the last call (the buffer was full, or a
// replay could not reach back far enough), and clears the mark. A reader that sees it reads
// the state afresh.
func (s *Subscription) Lagged() bool { return s.lagged.Swap(false) }

// Close ends the subscription: its channel is closed (events still buffered may be read
// first). It returns once the bus has let go of it; it is idempotent and safe after the bus
// has closed.
func (s *Subscription) Close() {
	s.once.Do(func() {
		req := subRequest{s: s, ack: make(chan struct{})}
		select {
		case s.bus.unsub <- req:
			<-req.ack
		case <-s.bus.done:
		}
	})
}

func (s *Subscription) takes(e Event) bool {
	if s.types != nil && !slices.Contains(s.types, e.Type) {
		return false
	}
	return s.viewer == nil || e.Audience.Sees(*s.viewer)
}

// offer puts e into the subscription's buffer, or marks it lagged when the buffer is full.
func (s *Subscription) offer(e Event) {
	select {
	case s.ch <- e:
	default:
		s.lagged.Store(true)
	}
}

// run is the owner goroutine.
func (b *Bus) run() {
	defer close(b.done)
	subs := map[*Subscription]struct{}{}
	ring := make([]Event, 0, b.history)
	var next uint64
	deliver := func(e Event) {
		next++
		e.ID, e.Time = next, time.Now().UTC()
		b.lastID.Store(next)
		if len(ring) == b.history {
			copy(ring, ring[1:])
			ring = ring[:b.history-1]
		}
		ring = append(ring, e)
		for s := range subs {
			if s.takes(e) {
				s.offer(e)
			}
		}
	}
	for {
		select {
		case e := <-b.in:
			deliver(e)
		case r := <-b.subs:
			// Number what was published before Subscribe was called first: those events reach
			// the new subscription only by replay (Since), as their ids say.
			// (Only what is queued now: publishers that keep publishing cannot starve it.)
			for n := len(b.in); n > 0; n-- {
				deliver(<-b.in)
			}
			subs[r.s] = struct{}{}
			b.count(r.s, +1)
			if r.s.since > 0 {
				b.replay(r.s, ring, next)
			}
			close(r.ack)
		case r := <-b.unsub:
			if _, ok := subs[r.s]; ok {
				delete(subs, r.s)
				b.count(r.s, -1)
				close(r.s.ch)
			}
			close(r.ack)
		case <-b.stop:
			for s := range subs {
				close(s.ch)
			}
			return
		}
	}
}

// replay offers s the ring's events after s.since, marking it lagged when some are gone.
func (b *Bus) replay(s *Subscription, ring []Event, newest uint64) {
	if s.since > newest {
		s.lagged.Store(true) // an id this bus never gave out
		return
	}
	if s.since == newest {
		return
	}
	if len(ring) == 0 || ring[0].ID > s.since+1 {
		s.lagged.Store(true)
	}
	for _, e := range ring {
		if e.ID > s.since && s.takes(e) {
			s.offer(e)
		}
	}
}

// count keeps the live set (for WatchingFor) in step with the subscriptions.
func (b *Bus) count(s *Subscription, d int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d > 0 {
		b.live[s] = struct{}{}
	} else {
		delete(b.live, s)
	}
}
