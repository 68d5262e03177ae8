// Package liveview serves the live view of agents' desktops: the computer channel, WS
// /api/app/agents/{id}/computer (SPEC §1.11, DESIGN data flows 3–4) — the live screen of the
// agent's desktop and the controlled input path (take over, hand back, input, clipboard,
// resize). docs/computer-protocol.md is the wire contract; keep both in step.
//
// The HTTP front (package api) authenticates the caller, checks the Host and Origin and that
// the agent is the caller's, then hands the request to Channel.Serve with a Caller; this
// package knows nothing of sessions or routes. The screens come from screen.Hubs (one driver
// stream per desktop, shared by every viewer), the leases from control.
//
// Goroutines: the Channel owns one goroutine that follows the event bus; each connection runs
// on its handler's goroutine (reading client messages) with a writer and a clipboard watcher
// it owns. Close ends them all and waits.
package liveview

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/control"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/screen"
)

// Desktop is an agent's desktop as the computer channel sees it.
type Desktop struct {
	// ID is the desktop (instance) id: the key of its control lease and its screen hub. ""
	// when the agent has no desktop yet.
	ID string
	// State is the instance state: running, paused, stopped, absent, creating, stopping, … .
	State string
	// Client is connected to the desktop's driver (a *guest.Client); a nil interface unless
	// the desktop runs and its driver answers. The Desktops implementation owns it: the
	// channel never closes it. A new connection (a restarted driver) must be a new value.
	Client Driver
	// Shared is set when the desktop is shared by the account's agents.
	Shared bool
	// IdleStopAt is when the idle timer stops the desktop; zero when no timer runs.
	IdleStopAt time.Time
	// Message says more about the state for people (e.g. the last error); optional.
	Message string
	// Kind is what the screen is: "" or "vm" for a desktop, "browser" for the agent's own
	// browser, "host" for the execution node's own screen.
	Kind string
}

// Driver is what the channel uses of a desktop's in-guest driver; *guest.Client satisfies
// it. It must be safe for concurrent use.
//
// A Driver that is also a screen.RegionSource (*guest.Client is) serves version 2 viewers
// region updates and the pointer; others (the host's own screen) serve them whole frames.
type Driver interface {
	screen.Source
	Input(ctx context.Context, in guest.Input) error
}

// Desktops finds agents' desktops for the computer channel. Desktop must only look: it never
// creates or starts a machine and never touches the idle timer (viewing is not activity) —
// except that it resumes a paused desktop, which the live view shows as it goes on. An
// agent without a desktop is Desktop{State: "absent"}, not an error. Implementations are safe
// for concurrent use; the VM manager provides the real one.
type Desktops interface {
	Desktop(ctx context.Context, accountID, agentID string) (Desktop, error)
}

// Controls is the control-lease service the channel uses; *control.Manager satisfies it.
type Controls interface {
	TakeOver(desktopID string, p control.Person) (control.Lease, error)
	Renew(desktopID, token string) (control.Lease, error)
	HandBack(desktopID, token string) error
	Switch(p control.Person, fromDesktop, fromToken, toDesktop string) (control.Lease, error)
	CheckInput(desktopID string, in control.InputAuth) error
	Holder(desktopID string) (control.Holder, bool)
}

// The real implementations of the interfaces above.
var (
	_ Driver              = (*guest.Client)(nil)
	_ screen.RegionSource = (*guest.Client)(nil)
	_ Controls            = (*control.Manager)(nil)
	_ screen.Observer     = (*control.Manager)(nil)
)

// Config configures a Channel. Desktops, Control and Screens are required.
type Config struct {
	Desktops Desktops
	Control  Controls
	Screens  *screen.Hubs
	Logger   *slog.Logger
	// PingInterval is how often the server pings; a connection silent (no pong, no message)
	// for 2.5 intervals is closed. 0 means 20 s.
	PingInterval time.Duration
	// WriteTimeout bounds every write to a client; a client that does not read is dropped.
	// 0 means 10 s.
	WriteTimeout time.Duration
	// Events is the event bus: desktop state, control, agent and node changes make the
	// connections concerned look at their desktop again and send fresh status. Nothing polls;
	// without a bus, status changes only through ControlChanged and Refresh.
	Events EventSource
}

// EventSource is what the channel needs of the event bus; *events.Bus satisfies it.
type EventSource interface {
	Subscribe(o events.SubscribeOptions) *events.Subscription
}

// channelEvents are the event types that can change what a connection shows.
var channelEvents = []events.Type{events.DesktopState, events.ControlChanged, events.AgentChanged, events.NodeChanged}

// Limits of the channel.
const (
	// ReadLimit caps one client message: a clipboard_set of the largest clipboard
	// (10 MiB, base64) and its JSON.
	ReadLimit = (guest.MaxClipboard/3+1)*4 + 64<<10
	// frameHeaderLen is the length of a binary frame's header.
	frameHeaderLen = 24
	// frameMagic starts every binary frame.
	frameMagic = "CBFR"
	// frameVersion is the binary frame header's version.
	frameVersion = 1
)

// Frame encodings in the binary header.
const (
	frameJPEG = 1
	framePNG  = 2
)

// Reasons the channel itself gives, next to control.Reason values.
const (
	reasonNotRunning   = "not_running"
	reasonUnknownFrame = "unknown_frame"
	reasonBadMessage   = "bad_message"
)

// Channel serves the computer websockets. Create it with New; Close it after the HTTP server
// has stopped accepting requests.
type Channel struct {
	cfg      Config
	log      *slog.Logger
	upgrader websocket.Upgrader
	wg       sync.WaitGroup // one per open connection

	sub     *events.Subscription // nil without a bus
	follows chan struct{}        // closed when the follower goroutine has ended

	mu     sync.Mutex
	conns  map[*conn]struct{} // guarded by mu
	closed bool               // guarded by mu; a writer ended by Close says "going away"
}

// New checks cfg and returns a channel.
func New(cfg Config) (*Channel, error) {
	if cfg.Desktops == nil || cfg.Control == nil || cfg.Screens == nil {
		return nil, errors.New("liveview: Config.Desktops, Control and Screens are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 20 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	c := &Channel{cfg: cfg, log: cfg.Logger, conns: map[*conn]struct{}{}, follows: make(chan struct{})}
	c.upgrader = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  32 << 10,
		WriteBufferPool:  &sync.Pool{},
		Subprotocols:     []string{subprotocolV2},
		// The guard has already refused foreign origins (same origin or a trusted one only).
		CheckOrigin: func(*http.Request) bool { return true },
	}
	if cfg.Events != nil {
		c.sub = cfg.Events.Subscribe(events.SubscribeOptions{Types: channelEvents, Buffer: 1024})
		go c.follow()
	} else {
		close(c.follows)
	}
	return c, nil
}

// follow is the channel's one goroutine reading the bus: each event wakes the connections it
// concerns (a lost event wakes them all). It ends when the subscription closes (Close, or the
// bus closing).
func (c *Channel) follow() {
	defer close(c.follows)
	for e := range c.sub.C() {
		if c.sub.Lagged() {
			c.Refresh()
			continue
		}
		switch d := e.Data.(type) {
		case events.Desktop:
			c.each(func(k *conn) {
				if k.desktopID() == d.InstanceID || (d.AccountID != "" && k.p.AccountID == d.AccountID) {
					k.refresh()
				}
			})
		case events.Control:
			c.each(func(k *conn) {
				if k.desktopID() == d.DesktopID {
					k.wake()
				}
			})
		case events.Agent:
			c.each(func(k *conn) {
				if k.agentID == d.AgentID {
					k.refresh()
				}
			})
		case events.Node:
			c.Refresh()
		}
	}
}

func (c *Channel) each(fn func(k *conn)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.conns {
		fn(k)
	}
}

// ControlChanged makes every connection watching ch.DesktopID send fresh status. With a bus
// the channel hears control changes from it; without one, call this from
// control.Config.OnChange.
func (c *Channel) ControlChanged(ch control.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.conns {
		if k.desktopID() == ch.DesktopID {
			k.wake()
		}
	}
}

// Reauthenticate makes every connection check its session now (an account was disabled or
// deleted, or its password changed); connections whose session ended are closed.
func (c *Channel) Reauthenticate() { c.Refresh() }

// Refresh makes every connection look at its desktop's state now.
func (c *Channel) Refresh() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.conns {
		k.refresh()
	}
}

// Close closes every connection (with "going away") and waits for their goroutines; new
// upgrades are refused. It is idempotent.
func (c *Channel) Close() error {
	c.mu.Lock()
	c.closed = true
	for k := range c.conns {
		k.cancel() // its writer sends "going away"
	}
	c.mu.Unlock()
	c.wg.Wait()
	if c.sub != nil {
		c.sub.Close()
	}
	<-c.follows
	return nil
}

func (c *Channel) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Caller is who opens a connection, for which agent, as the HTTP front authenticated them.
// Owns and Valid are the front's checks, asked again while the connection lasts.
type Caller struct {
	AccountID string
	Username  string
	// AgentID is the agent whose desktop the connection shows; the front has checked that
	// it is the caller's.
	AgentID string
	// Owns returns nil when the caller owns agentID (switch names the agent it leaves);
	// required: nil refuses every switch from another agent.
	Owns func(agentID string) error
	// Valid returns nil while the session holds and the agent is still the caller's; nil
	// means the connection is never checked again. Logging out, a password change,
	// disabling or deleting the account ends the connection.
	Valid func() error
}

// Desktop is the desktop the live view shows for agentID (Config.Desktops: it never starts
// one). The file routes use it to reach the same desktop.
func (c *Channel) Desktop(ctx context.Context, accountID, agentID string) (Desktop, error) {
	return c.cfg.Desktops.Desktop(ctx, accountID, agentID)
}

// Status is the status message for who (a plain GET of the route answers it as JSON).
func (c *Channel) Status(ctx context.Context, who Caller) Status {
	k := c.newConn(who)
	k.resolve(ctx)
	st, _ := k.status()
	return st
}

// Serve upgrades r to a websocket and serves the connection until it ends. When the channel
// takes no connections (Close was called) it answers nothing and returns an error of class
// unavailable, for the front to answer; otherwise it has answered (a failed upgrade is
// answered by the upgrader) and returns nil.
func (c *Channel) Serve(w http.ResponseWriter, r *http.Request, who Caller) error {
	k := c.newConn(who)
	k.resolve(r.Context())
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fault.Unavailable("the server is shutting down")
	}
	c.wg.Add(1)
	c.mu.Unlock()
	defer c.wg.Done()
	ws, err := c.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil // the upgrader has answered
	}
	k.ws = ws
	k.v2 = ws.Subprotocol() == subprotocolV2
	// The connection's lifetime is its own: a hijacked connection outlives the request's
	// context only until the handler returns, which is when this one ends.
	k.ctx, k.cancel = context.WithCancel(context.WithoutCancel(r.Context()))
	c.mu.Lock()
	c.conns[k] = struct{}{}
	closed := c.closed
	c.mu.Unlock()
	if closed {
		k.cancel()
	}
	c.log.Info("computer channel opened", "agent", who.AgentID, "user", who.Username, "desktop", k.desktopID(), "v2", k.v2)
	k.run()
	c.mu.Lock()
	delete(c.conns, k)
	c.mu.Unlock()
	c.log.Info("computer channel closed", "agent", who.AgentID, "user", who.Username)
	return nil
}

func (c *Channel) newConn(who Caller) *conn {
	return &conn{ch: c, p: who, agentID: who.AgentID,
		poke: make(chan struct{}, 1), look: make(chan struct{}, 1), replies: make(chan any, 32)}
}

// conn is one websocket. The handler goroutine reads and acts on client messages;
// one writer goroutine, owned by run, does every write.
type conn struct {
	ch      *Channel
	ws      *websocket.Conn
	p       Caller // who opened it: their checks are p.Owns and p.Valid
	agentID string // p.AgentID
	v2      bool   // the client speaks version 2 (regions, pointer)

	ctx    context.Context
	cancel context.CancelFunc

	poke    chan struct{} // capacity 1: control changed, send status if it differs
	look    chan struct{} // capacity 1: look at the desktop's state now
	replies chan any      // replies to client messages, written in order

	mu        sync.Mutex
	desk      Desktop              // guarded by mu; as last resolved
	deskErr   error                // guarded by mu; why the desktop could not be looked up
	lastFrame uint64               // guarded by mu; newest frame id sent for frameDesk
	frameDesk string               // guarded by mu; the desktop lastFrame counts frames of
	streamErr error                // guarded by mu; why the screen stream ended, until it runs again
	rviewer   *screen.RegionViewer // guarded by mu; the version 2 viewer, while one runs
	leaseVer  uint64               // guarded by mu; version of the last lease granted through this connection
}

func (k *conn) wake() {
	select {
	case k.poke <- struct{}{}:
	default:
	}
}

func (k *conn) refresh() {
	select {
	case k.look <- struct{}{}:
	default:
	}
}

func (k *conn) desktopID() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.desk.ID
}

func (k *conn) current() Desktop {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.desk
}

// resolve looks up the agent's desktop (never starting it).
func (k *conn) resolve(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := k.ch.cfg.Desktops.Desktop(ctx, k.p.AccountID, k.agentID)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil && d.ID != k.frameDesk {
		// Another desktop: its frames are new to this connection. A failed lookup keeps the
		// count (the desktop it names has not changed).
		k.lastFrame, k.frameDesk = 0, d.ID
	}
	k.desk, k.deskErr = d, err
	if err != nil {
		k.desk = Desktop{State: "unknown"}
	}
}

// run serves the connection until the client leaves, a write fails or the channel closes.
func (k *conn) run() {
	defer k.ws.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer k.ws.Close() // unblocks the reader when the writer ends first
		k.writeLoop()
	}()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		k.watchClipboard()
	}()
	k.readLoop()
	k.cancel()
	<-done
	<-watched
}

// Status is the status message (docs/computer-protocol.md, "status").
type Status struct {
	Type       string     `json:"type"`
	AgentID    string     `json:"agentId"`
	DesktopID  string     `json:"desktopId,omitempty"`
	State      string     `json:"state"`
	Kind       string     `json:"kind"` // vm | browser | host
	Shared     bool       `json:"shared"`
	Streaming  bool       `json:"streaming"`
	Message    string     `json:"message,omitempty"`
	Control    *Control   `json:"control"`
	IdleStopAt *time.Time `json:"idleStopAt,omitempty"`
	ServerTime time.Time  `json:"serverTime"`
}

// Control says who operates the desktop.
type Control struct {
	Kind      string     `json:"kind"` // person | agent
	Name      string     `json:"name"`
	Activity  string     `json:"activity"`
	You       bool       `json:"you"` // this account through this agent's channel
	Version   uint64     `json:"version"`
	Since     time.Time  `json:"since"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// status builds the status message; key is it without the server time, to send only changes.
func (k *conn) status() (Status, string) {
	k.mu.Lock()
	d, derr, serr := k.desk, k.deskErr, k.streamErr
	k.mu.Unlock()
	st := Status{Type: "status", AgentID: k.agentID, DesktopID: d.ID, State: d.State, Shared: d.Shared,
		Message: d.Message, Kind: d.Kind}
	if st.Kind == "" {
		st.Kind = "vm"
	}
	if st.State == "" {
		st.State = "absent"
	}
	switch {
	case derr != nil:
		st.Message = "cannot look up this agent's desktop: " + derr.Error()
	case d.ID == "" || st.State == "absent":
		if st.Message == "" {
			st.Message = "this agent has no desktop yet; create one from the computer panel"
		}
	case st.State != "running":
		if st.Message == "" {
			st.Message = "the desktop is " + st.State + "; viewing does not start it"
		}
	case d.Client == nil:
		st.Message = "the desktop's driver does not answer yet"
	case serr != nil:
		st.Message = "the screen stream stopped: " + serr.Error()
	default:
		st.Streaming = true
	}
	if !d.IdleStopAt.IsZero() {
		t := d.IdleStopAt.UTC()
		st.IdleStopAt = &t
	}
	if d.ID != "" {
		if h, ok := k.ch.cfg.Control.Holder(d.ID); ok {
			cj := &Control{Kind: string(h.Kind), Name: h.Name(), Activity: h.Activity(), Version: h.Version,
				Since: h.Since.UTC()}
			if h.Kind == control.HolderPerson {
				cj.You = h.Person.AccountID == k.p.AccountID && h.Person.AgentID == k.agentID
				t := h.ExpiresAt.UTC()
				cj.ExpiresAt = &t
			}
			st.Control = cj
		}
	}
	b, _ := json.Marshal(st)
	return st, string(b)
}

// writeLoop does every write: status, replies, frames or updates, pointer messages, pings.
// It watches the desktop's screen while the desktop runs (stream.go): as frames (version 1),
// or as region updates under flow control (version 2; frames again when the desktop's driver
// is too old for regions).
func (k *conn) writeLoop() {
	cfg := k.ch.cfg
	ping := time.NewTicker(cfg.PingInterval)
	defer ping.Stop()
	var (
		st        stream  // the screen watched, while one is
		watching  Desktop // the desktop watched
		lastSent  string  // key of the last status sent
		noRegions Driver  // the driver found too old for regions (frames instead)
		// A running desktop not watched — its stream failed, or its driver did not answer when
		// it was looked up (a link still connecting) — is looked up again after a backoff (1 s
		// doubling to 30 s, reset by what it sends): its state has not changed, so no event comes.
		retry   <-chan time.Time
		backoff = time.Second
	)
	stopWatching := func() {
		if st != nil {
			st.close()
			st = nil
		}
	}
	defer stopWatching()
	// update (re)starts or stops watching to match the resolved desktop, then sends status if
	// it changed. A stream that failed is only replaced by a later update(true).
	update := func(retry bool) error {
		d := k.current()
		want := d.ID != "" && d.State == "running" && d.Client != nil
		if st != nil && (!want || d.ID != watching.ID || d.Client != watching.Client) {
			stopWatching()
		}
		if want && st == nil && retry {
			s, err := k.watch(d, noRegions)
			if err == nil {
				st, watching = s, d
			}
			k.mu.Lock()
			k.streamErr = err
			k.mu.Unlock()
		}
		msg, key := k.status()
		if key == lastSent {
			return nil
		}
		lastSent = key
		msg.ServerTime = time.Now().UTC()
		return k.writeJSON(msg)
	}
	if err := update(true); err != nil {
		return
	}
	for {
		if d := k.current(); st == nil && retry == nil && d.ID != "" && d.State == "running" {
			retry = time.After(backoff)
			backoff = min(2*backoff, 30*time.Second)
		}
		var (
			ready, ended <-chan struct{}
			held         <-chan time.Time
		)
		if st != nil {
			ready, ended, held = st.ready(), st.done(), st.held()
		}
		var err error
		select {
		case <-k.ctx.Done():
			msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
			if k.ch.isClosed() {
				msg = websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutting down")
			}
			k.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
			return
		case m := <-k.replies:
			err = k.writeJSON(m)
		case <-ready:
			err = st.send()
			backoff = time.Second
		case <-held:
			err = st.resume()
		case <-ended:
			verr := st.err()
			if errors.Is(verr, screen.ErrNoRegions) {
				noRegions, verr = watching.Client, nil // watch frames instead, at once
			}
			k.mu.Lock()
			k.streamErr = verr
			k.mu.Unlock()
			stopWatching()
			err = update(verr == nil)
		case <-retry:
			retry = nil
			k.resolve(k.ctx)
			err = update(true)
		case <-k.poke:
			err = update(false)
		case <-k.look:
			if k.sessionEnded() {
				return
			}
			k.resolve(k.ctx)
			err = update(true)
		case <-ping.C:
			// The session is checked with the ping too (it may expire without an event).
			if k.sessionEnded() {
				return
			}
			err = k.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(cfg.WriteTimeout))
		}
		if err != nil {
			k.ch.log.Debug("computer channel write failed", "agent", k.agentID, "err", err)
			return
		}
	}
}

// sessionEnded checks the connection's session; when it ended, it says why and closes.
func (k *conn) sessionEnded() bool {
	if k.p.Valid == nil {
		return false
	}
	err := k.p.Valid()
	if err == nil {
		return false
	}
	k.writeJSON(errorJSON{Type: "error", Op: "session", Reason: "session_ended", Code: "unauthenticated", Message: err.Error()})
	k.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "session ended"),
		time.Now().Add(time.Second))
	k.ch.log.Info("computer channel closed: the session ended", "agent", k.agentID, "user", k.p.Username, "why", err)
	return true
}

func (k *conn) writeJSON(v any) error {
	k.ws.SetWriteDeadline(time.Now().Add(k.ch.cfg.WriteTimeout))
	return k.ws.WriteJSON(v)
}

// writeText sends a text message already encoded (computerwire's cursor and pointer).
func (k *conn) writeText(msg []byte) error {
	k.ws.SetWriteDeadline(time.Now().Add(k.ch.cfg.WriteTimeout))
	return k.ws.WriteMessage(websocket.TextMessage, msg)
}

// sent records frame id as sent on this connection (input may name it from now on).
func (k *conn) sent(id uint64) {
	k.mu.Lock()
	if id > k.lastFrame {
		k.lastFrame = id
	}
	k.mu.Unlock()
}

// clientMsg is any client message (docs/computer-protocol.md, "Client messages").
type clientMsg struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Token   string `json:"token,omitempty"`
	Version uint64 `json:"version,omitempty"`
	FrameID uint64 `json:"frameId,omitempty"`
	// input
	Action string `json:"action,omitempty"`
	X      int    `json:"x,omitempty"`
	Y      int    `json:"y,omitempty"`
	ToX    int    `json:"toX,omitempty"`
	ToY    int    `json:"toY,omitempty"`
	Button int    `json:"button,omitempty"`
	DeltaX int    `json:"deltaX,omitempty"`
	DeltaY int    `json:"deltaY,omitempty"`
	Keys   string `json:"keys,omitempty"`
	Text   string `json:"text,omitempty"`
	// switch
	FromAgentID string `json:"fromAgentId,omitempty"`
	FromToken   string `json:"fromToken,omitempty"`
	// clipboard_set (Text for text, Data — base64 in JSON — for an image) and clipboard_get
	Mime      string `json:"mime,omitempty"`
	Data      []byte `json:"data,omitempty"`
	Selection string `json:"selection,omitempty"`
	// resize
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
}

// leaseJSON answers take_over, renew and switch.
type leaseJSON struct {
	Type      string    `json:"type"` // lease
	ID        string    `json:"id,omitempty"`
	Op        string    `json:"op"`
	DesktopID string    `json:"desktopId"`
	Token     string    `json:"token"`
	Version   uint64    `json:"version"`
	ExpiresAt time.Time `json:"expiresAt"`
	// RenewInSeconds is when to send the next renew (a third of the lease's life).
	RenewInSeconds float64 `json:"renewInSeconds"`
}

// okJSON answers hand_back, and input that carried an id.
type okJSON struct {
	Type string `json:"type"` // ok
	ID   string `json:"id,omitempty"`
	Op   string `json:"op"`
}

// errorJSON refuses a client message; nothing happened.
type errorJSON struct {
	Type    string `json:"type"` // error
	ID      string `json:"id,omitempty"`
	Op      string `json:"op"`
	Reason  string `json:"reason"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// readLoop reads client messages until the connection ends and acts on each in order.
func (k *conn) readLoop() {
	wait := k.ch.cfg.PingInterval * 5 / 2
	k.ws.SetReadLimit(ReadLimit)
	k.ws.SetReadDeadline(time.Now().Add(wait))
	k.ws.SetPongHandler(func(string) error {
		k.ws.SetReadDeadline(time.Now().Add(wait))
		return nil
	})
	for {
		typ, data, err := k.ws.ReadMessage()
		if err != nil {
			return
		}
		k.ws.SetReadDeadline(time.Now().Add(wait))
		var m clientMsg
		if typ != websocket.TextMessage || json.Unmarshal(data, &m) != nil {
			k.reply(errorJSON{Type: "error", Op: "unknown", Reason: reasonBadMessage, Code: "invalid",
				Message: "send JSON text messages (see docs/computer-protocol.md)"})
			continue
		}
		if r := k.handle(&m); r != nil {
			k.reply(r)
		}
	}
}

// reply queues a message for the writer; it blocks while the queue is full (the client is
// not reading), which stops reading its messages too.
func (k *conn) reply(v any) {
	select {
	case k.replies <- v:
	case <-k.ctx.Done():
	}
}
