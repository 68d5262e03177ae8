// Package x11 is the driver's window onto the X server: one persistent connection
// (github.com/jezek/xgb) that captures the screen (MIT-SHM when the server offers it, else
// GetImage), counts screen changes (XDAMAGE on the root window, else cheap polling with a row
// hash) and injects input (XTEST), including non-ASCII text by temporarily remapping a spare
// keycode to a Unicode keysym.
//
// A Display is safe for concurrent use. When the X server goes away, every method returns an
// error and Done is closed; the owner opens a new Display once the server is back.
package x11

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

// ErrClosed is returned by a Display whose connection is gone.
var ErrClosed = errors.New("x11: connection to the X server is closed")

// Display is one persistent connection to an X server.
type Display struct {
	conn   *xgb.Conn
	root   xproto.Window
	width  int
	height int
	damage bool // XDAMAGE drives change counting; else a poller hashes frames

	capMu sync.Mutex // guards the capture buffers below
	cap   capturer

	chMu       sync.Mutex // guards gen, lastChange, changed
	gen        uint64     // screen generation: bumped on every observed change
	lastChange time.Time
	changed    chan struct{} // closed and replaced on every change

	kb keyboard // guarded by its own mutex

	cursorOK   bool       // XFIXES reports cursor changes; set at Open
	ptrMu      sync.Mutex // guards ptr, ptrGen, ptrChanged
	ptr        Pointer
	ptrGen     uint64
	ptrChanged chan struct{} // closed and replaced on every pointer change
	curMu      sync.Mutex    // guards cursor
	cursor     *Cursor       // the last cursor image read, by serial

	changes changeLog // guarded by chMu: recent changes with their areas (settle waits read it)

	clip      clipboard // the CLIPBOARD and PRIMARY selections (clipboard.go)
	clipWatch bool      // selection changes come from XFIXES events

	randrOnce sync.Once // RandR initialised on the first resize
	randrErr  error

	marker   xproto.Window // an unmapped window of ours: SyncEvents sends itself events to it
	markMu   sync.Mutex    // guards markSent, markSeen, markWake
	markSent uint32
	markSeen uint32
	markWake chan struct{} // closed and replaced when a marker arrives

	stop chan struct{}
	done chan struct{} // closed when the event loop ends
	wg   sync.WaitGroup
	once sync.Once
}

// Open connects to the X server named by display (e.g. ":0") and prepares capture, change
// tracking and input. XTEST is required; MIT-SHM and DAMAGE are used when present.
func Open(display string) (*Display, error) {
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		return nil, fmt.Errorf("x11: connect to display %s: %w", display, err)
	}
	setup := xproto.Setup(conn)
	scr := setup.DefaultScreen(conn)
	d := &Display{
		conn:       conn,
		root:       scr.Root,
		width:      int(scr.WidthInPixels),
		height:     int(scr.HeightInPixels),
		changed:    make(chan struct{}),
		lastChange: time.Now(),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		markWake:   make(chan struct{}),
		ptrChanged: make(chan struct{}),
	}
	if err := xtest.Init(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("x11: display %s lacks the XTEST extension: %w", display, err)
	}
	d.kb.init(conn, setup)
	if err := d.cap.init(conn, d.root, d.width, d.height); err != nil {
		conn.Close()
		return nil, err
	}
	xfixesOK := initXFixes(conn) == nil
	d.damage = xfixesOK && d.initDamage() == nil
	if xfixesOK {
		d.initCursor() // without it the pointer is still tracked, only its image is unknown
	}
	if err := d.initMarker(scr); err != nil {
		conn.Close()
		return nil, fmt.Errorf("x11: display %s: %w", display, err)
	}
	if err := d.initClipboard(scr, xfixesOK); err != nil {
		conn.Close()
		return nil, fmt.Errorf("x11: display %s: clipboard: %w", display, err)
	}
	d.wg.Add(1)
	go d.eventLoop()
	if !d.damage {
		d.wg.Add(1)
		go d.pollLoop()
	}
	return d, nil
}

func initXFixes(conn *xgb.Conn) error {
	if err := xfixes.Init(conn); err != nil {
		return err
	}
	_, err := xfixes.QueryVersion(conn, 5, 0).Reply()
	return err
}

func (d *Display) initDamage() error {
	if err := damage.Init(d.conn); err != nil {
		return err
	}
	if _, err := damage.QueryVersion(d.conn, 1, 1).Reply(); err != nil {
		return err
	}
	id, err := damage.NewDamageId(d.conn)
	if err != nil {
		return err
	}
	return damage.CreateChecked(d.conn, id, xproto.Drawable(d.root), damage.ReportLevelNonEmpty).Check()
}

func (d *Display) initMarker(scr *xproto.ScreenInfo) error {
	id, err := xproto.NewWindowId(d.conn)
	if err != nil {
		return err
	}
	d.marker = id
	return xproto.CreateWindowChecked(d.conn, 0, id, scr.Root, -1, -1, 1, 1, 0,
		xproto.WindowClassInputOnly, 0, 0, nil).Check()
}

// SyncEvents returns once every event the server sent before this call — damage
// notifications of drawing that has happened — has been processed, so Generation is current.
// It sends an event to itself and waits for it to come back through the event stream.
func (d *Display) SyncEvents(ctx context.Context) error {
	if err := d.alive(); err != nil {
		return err
	}
	d.markMu.Lock()
	d.markSent++
	token := d.markSent
	ev := xproto.ClientMessageEvent{Format: 32, Window: d.marker, Data: xproto.ClientMessageDataUnionData32New([]uint32{token, 0, 0, 0, 0})}
	xproto.SendEvent(d.conn, false, d.marker, 0, string(ev.Bytes()))
	d.markMu.Unlock()
	for {
		d.markMu.Lock()
		seen, wake := d.markSeen, d.markWake
		d.markMu.Unlock()
		if int32(seen-token) >= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.done:
			return ErrClosed
		case <-wake:
		}
	}
}

// Size returns the screen size in pixels.
func (d *Display) Size() (width, height int) { return d.width, d.height }

// UsesSHM reports whether captures go through a MIT-SHM segment.
func (d *Display) UsesSHM() bool { return d.cap.shm }

// UsesDamage reports whether change tracking uses XDAMAGE (else polling).
func (d *Display) UsesDamage() bool { return d.damage }

// Ping makes a round trip to the X server: it fails when the server stopped answering.
func (d *Display) Ping() error {
	if err := d.alive(); err != nil {
		return err
	}
	if _, err := xproto.GetInputFocus(d.conn).Reply(); err != nil {
		return fmt.Errorf("x11: ping: %w", err)
	}
	return nil
}

// Done is closed when the connection to the X server is lost or the Display is closed.
func (d *Display) Done() <-chan struct{} { return d.done }

// Close releases the shared memory segment and closes the connection. It waits for the
// Display's goroutines.
func (d *Display) Close() error {
	d.once.Do(func() {
		close(d.stop)
		d.capMu.Lock()
		d.cap.release(d.conn)
		d.capMu.Unlock()
		d.kb.restoreNow(d.conn)
		d.conn.Close()
	})
	d.wg.Wait()
	return nil
}

func (d *Display) alive() error {
	select {
	case <-d.done:
		return ErrClosed
	default:
		return nil
	}
}

// eventLoop owns the event stream: damage notifications bump the generation, mapping
// notifications mark the keyboard map stale. It ends when the connection closes.
func (d *Display) eventLoop() {
	defer d.wg.Done()
	defer close(d.done)
	for {
		ev, xerr := d.conn.WaitForEvent()
		if ev == nil && xerr == nil {
			return // connection closed
		}
		if d.handleClipboardEvent(ev) {
			continue
		}
		switch e := ev.(type) {
		case damage.NotifyEvent:
			damage.Subtract(d.conn, e.Damage, 0, 0)
			d.bumpArea(int(e.Area.X), int(e.Area.Y), int(e.Area.Width), int(e.Area.Height))
		case xfixes.CursorNotifyEvent:
			d.setPointer(func(p *Pointer) { p.Serial = e.CursorSerial })
		case xproto.MappingNotifyEvent:
			d.kb.markStale()
		case xproto.ClientMessageEvent:
			if e.Window == d.marker && e.Format == 32 {
				d.markMu.Lock()
				d.markSeen = e.Data.Data32[0]
				close(d.markWake)
				d.markWake = make(chan struct{})
				d.markMu.Unlock()
			}
		}
	}
}

// pollLoop stands in for XDAMAGE: it hashes a capture ten times a second.
func (d *Display) pollLoop() {
	defer d.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last uint64
	for {
		select {
		case <-d.stop:
			return
		case <-d.done:
			return
		case <-t.C:
		}
		var sum uint64
		d.capMu.Lock()
		raw, err := d.cap.grab(d.conn)
		if err == nil {
			h := fnv.New64a()
			h.Write(raw)
			sum = h.Sum64()
		}
		d.capMu.Unlock()
		if err == nil && sum != last {
			last = sum
			d.bumpArea(0, 0, d.width, d.height)
		}
	}
}

// bumpArea records a change of the screen within the given rectangle.
func (d *Display) bumpArea(x, y, w, h int) {
	now := time.Now()
	d.chMu.Lock()
	d.gen++
	d.lastChange = now
	d.changes.add(Change{At: now, Gen: d.gen, X: x, Y: y, W: w, H: h})
	close(d.changed)
	d.changed = make(chan struct{})
	d.chMu.Unlock()
}

// Generation returns the current screen generation, the time of the last observed change,
// and a channel closed at the next change.
func (d *Display) Generation() (gen uint64, last time.Time, next <-chan struct{}) {
	d.chMu.Lock()
	defer d.chMu.Unlock()
	return d.gen, d.lastChange, d.changed
}

// WaitChange blocks until the generation exceeds after and returns it.
func (d *Display) WaitChange(ctx context.Context, after uint64) (uint64, error) {
	for {
		gen, _, next := d.Generation()
		if gen > after {
			return gen, nil
		}
		select {
		case <-ctx.Done():
			return gen, ctx.Err()
		case <-d.done:
			return gen, ErrClosed
		case <-next:
		}
	}
}

// WaitQuiet blocks until no change has been seen for quiet (counted from the later of the
// call and the last change), or until max has passed since the call (settled reports which),
// and returns the generation at that point.
func (d *Display) WaitQuiet(ctx context.Context, quiet, max time.Duration) (gen uint64, settled bool, err error) {
	start := time.Now()
	deadline := start.Add(max)
	for {
		gen, last, next := d.Generation()
		now := time.Now()
		if last.Before(start) {
			last = start // the quiet period counts from the call: the caller just acted
		}
		quietAt := last.Add(quiet)
		if !now.Before(quietAt) {
			return gen, true, nil
		}
		if !now.Before(deadline) {
			return gen, false, nil
		}
		wake := quietAt
		if deadline.Before(wake) {
			wake = deadline
		}
		t := time.NewTimer(wake.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return gen, false, ctx.Err()
		case <-d.done:
			t.Stop()
			return gen, false, ErrClosed
		case <-next:
		case <-t.C:
		}
		t.Stop()
	}
}
