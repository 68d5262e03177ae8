package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/api"
	"cubicle/backend/auth"
	"cubicle/backend/control"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/liveview"
	"cubicle/backend/profile"
	"cubicle/backend/screen"
	"cubicle/backend/store"
)

// liveServer is the app's HTTP API with the computer channel for one desktop, on a loopback
// port: the same auth, guard, control leases, screen hub and websocket code `cubicle serve`
// runs, over a temporary store.
type liveServer struct {
	st    *store.Store
	ctl   *control.Manager
	hubs  *screen.Hubs
	ch    *liveview.Channel
	stop  context.CancelFunc
	done  chan error
	url   string // ws://127.0.0.1:PORT/api/app/agents/ID/computer
	addr  string // 127.0.0.1:PORT
	agent string // the agent whose desktop it serves (the routes' {id})
	token string
}

// liveDesktops serves the benchmark's one desktop to the computer channel (liveview.Desktops).
type liveDesktops struct {
	id string
	c  *guest.Client
}

func (l liveDesktops) Desktop(context.Context, string, string) (liveview.Desktop, error) {
	return liveview.Desktop{ID: l.id, State: "running", Client: l.c}, nil
}

// startLive starts the server for d, whose driver it reaches through client, with its store
// in file db of the run's directory; close it with close.
func (r *runner) startLive(ctx context.Context, d *desktop, client *guest.Client, db string) (_ *liveServer, err error) {
	ls := &liveServer{done: make(chan error, 1)}
	defer func() {
		if err != nil {
			ls.close()
		}
	}()
	if ls.st, err = store.Open(filepath.Join(r.runRoot, db), store.Options{Logger: r.log}); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	rand.Read(key)
	as, err := auth.New(auth.Config{Accounts: ls.st, Key: key, Logger: r.log})
	if err != nil {
		return nil, err
	}
	pw := make([]byte, 16)
	rand.Read(pw)
	if _, err := as.EnsureAdmin(auth.Bootstrap{Username: "bench", Password: hex.EncodeToString(pw)}); err != nil {
		return nil, err
	}
	p, err := as.Login("bench", hex.EncodeToString(pw), "bench")
	if err != nil {
		return nil, err
	}
	ls.token = p.Token
	profiles := profile.New(ls.st, r.log)
	ag, err := profiles.Create(p.AccountID, "bench")
	if err != nil {
		return nil, err
	}
	var chp atomic.Pointer[liveview.Channel]
	ls.ctl = control.New(control.Config{Logger: r.log, LeaseTTL: 30 * time.Minute, OnChange: func(c control.Change) {
		if ch := chp.Load(); ch != nil {
			ch.ControlChanged(c)
		}
	}})
	if err := ls.ctl.Start(ctx); err != nil {
		return nil, err
	}
	ls.hubs = screen.New(screen.Config{Observer: ls.ctl, Logger: r.log})
	if ls.ch, err = liveview.New(liveview.Config{Desktops: liveDesktops{id: "bench-" + d.name, c: client},
		Control: ls.ctl, Screens: ls.hubs, Logger: r.log}); err != nil {
		return nil, err
	}
	chp.Store(ls.ch)
	srv, err := api.New(api.Config{Auth: as, Accounts: ls.st, Profiles: profiles, LiveView: ls.ch, Logger: r.log, Version: r.cfg.Version,
		AllowedHosts: []string{"127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fault.Unavailable("bench: listen on loopback: %v", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ls.stop = cancel
	go func() { ls.done <- srv.Run(sctx, ln) }() // owned: close cancels it and waits
	ls.url = fmt.Sprintf("ws://%s/api/app/agents/%s/computer", ln.Addr(), ag.ID)
	ls.addr = ln.Addr().String()
	ls.agent = ag.ID
	return ls, nil
}

// close stops the server and everything under it; it is safe on a half-built server.
func (ls *liveServer) close() {
	if ls.stop != nil {
		ls.stop()
		<-ls.done
	}
	if ls.ch != nil {
		ls.ch.Close()
	}
	if ls.hubs != nil {
		ls.hubs.Close()
	}
	if ls.ctl != nil {
		ls.ctl.Close()
	}
	if ls.st != nil {
		ls.st.Close()
	}
}

// frameEvent is one binary message (a version 1 frame or a version 2 update) as the client
// read it.
type frameEvent struct {
	id   uint64
	size int // bytes of the message
	key  bool
	at   time.Time
}

// pointerEvent is one pointer message (version 2).
type pointerEvent struct {
	x, y int
	at   time.Time
}

// wsClient is a computer channel client like the web UI: it reads every message in its own
// goroutine and counts the bytes that arrive on the TCP connection. v2 clients speak version
// 2 (region updates and pointer messages), like the UI; others version 1 (whole frames).
type wsClient struct {
	ws       *websocket.Conn
	v2       bool
	read     atomic.Int64
	newest   atomic.Uint64 // newest frame id received
	frames   chan frameEvent
	pointers chan pointerEvent
	replies  chan map[string]any
	wg       sync.WaitGroup
}

type countConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// dialOptions choose the protocol version and, when via is set, an address to connect to
// instead of the server's (an emulated slow link in front of it).
type dialOptions struct {
	v2  bool
	via string
}

// dialLive opens the channel; close it with close.
func dialLive(ctx context.Context, ls *liveServer, o dialOptions) (*wsClient, error) {
	c := &wsClient{v2: o.v2, frames: make(chan frameEvent, 8192), pointers: make(chan pointerEvent, 1024),
		replies: make(chan map[string]any, 64)}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 64 << 10,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if o.via != "" {
				addr = o.via
			}
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countConn{conn, &c.read}, nil
		}}
	if o.v2 {
		d.Subprotocols = []string{subprotocolV2}
	}
	ws, resp, err := d.DialContext(ctx, ls.url, http.Header{"Authorization": {"Bearer " + ls.token}})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return nil, fault.Unavailable("bench: open the computer channel: %v (HTTP %d)", err, code)
	}
	if o.v2 && ws.Subprotocol() != subprotocolV2 {
		ws.Close()
		return nil, fault.Unavailable("bench: the computer channel did not agree to version 2")
	}
	c.ws = ws
	c.wg.Add(1)
	go c.readLoop() // owned: ends when ws is closed
	return c, nil
}

// subprotocolV2 is the computer channel's version 2 (docs/computer-protocol.md).
const subprotocolV2 = "cubicle.computer.v2"

func (c *wsClient) readLoop() {
	defer c.wg.Done()
	defer close(c.frames)
	for {
		mt, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		now := time.Now()
		switch mt {
		case websocket.BinaryMessage:
			if len(data) < 24 || string(data[:4]) != "CBFR" {
				continue
			}
			id := binary.BigEndian.Uint64(data[8:16])
			c.newest.Store(id)
			key := data[4] == 1 || data[7]&1 != 0 // version 1 frames are whole screens
			select {
			case c.frames <- frameEvent{id: id, size: len(data), key: key, at: now}:
			default: // the measuring side fell behind; counts stay right through newest/read
			}
		case websocket.TextMessage:
			var m map[string]any
			if json.Unmarshal(data, &m) != nil {
				continue
			}
			switch m["type"] {
			case "status", "cursor":
			case "pointer":
				x, _ := m["x"].(float64)
				y, _ := m["y"].(float64)
				select {
				case c.pointers <- pointerEvent{x: int(x), y: int(y), at: now}:
				default:
				}
			default:
				select {
				case c.replies <- m:
				default:
				}
			}
		}
	}
}

func (c *wsClient) close() {
	c.ws.Close()
	c.wg.Wait()
}

func (c *wsClient) send(m map[string]any) error {
	c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteJSON(m)
}

// reply waits for the next reply.
func (c *wsClient) reply(ctx context.Context) (map[string]any, error) {
	select {
	case m := <-c.replies:
		return m, nil
	case <-time.After(10 * time.Second):
		return nil, fault.Unavailable("bench: the computer channel did not reply within 10 s")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// frameAfter waits for a frame newer than after.
func (c *wsClient) frameAfter(ctx context.Context, after uint64, timeout time.Duration) (frameEvent, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return frameEvent{}, fault.Unavailable("bench: the computer channel closed")
			}
			if f.id > after {
				return f, nil
			}
		case <-t.C:
			return frameEvent{}, fault.Unavailable("bench: no new frame within %s", timeout)
		case <-ctx.Done():
			return frameEvent{}, ctx.Err()
		}
	}
}

// quiet waits until no frame arrived for d (at most max), draining the frames seen.
func (c *wsClient) quiet(ctx context.Context, d, limit time.Duration) error {
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		select {
		case _, ok := <-c.frames:
			if !ok {
				return fault.Unavailable("bench: the computer channel closed")
			}
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// takeOverLive connects a version 2 websocket client (what the UI speaks) to ls, waits for
// the first update, takes over and waits for a quiet screen; the caller closes the client.
func takeOverLive(ctx context.Context, ls *liveServer) (*wsClient, map[string]any, error) {
	c, err := dialLive(ctx, ls, dialOptions{v2: true})
	if err != nil {
		return nil, nil, err
	}
	if _, err := c.frameAfter(ctx, 0, 15*time.Second); err != nil {
		c.close()
		return nil, nil, fmt.Errorf("first frame: %w", err)
	}
	lease, err := c.takeOver(ctx)
	if err != nil {
		c.close()
		return nil, nil, err
	}
	return c, lease, nil
}

// liveInputLatency times LiveInputs inputs (after a warm-up pair) from the websocket message
// to the changed update at the client, with 300 ms of quiet between them.
func (r *runner) liveInputLatency(ctx context.Context, c *wsClient, lease map[string]any) ([]float64, error) {
	return inputLatency(ctx, c, lease, max(r.cfg.Counts.LiveInputs, 2), true)
}

// liveInputs are inputs that change the bare desktop: a right click opens xfdesktop's menu,
// Escape closes it again.
var liveInputs = []map[string]any{
	{"action": "right_click", "x": 900, "y": 300},
	{"action": "key", "keys": "Escape"},
}

// animation is a program that keeps a quarter of the screen changing: ImageMagick's animate
// (from the peers image) cycling three 640x400 plasma images every 10 ms.
var animation = []string{"animate", "-delay", "1", "-size", "640x400", "-geometry", "+320+200", "plasma:", "plasma:", "plasma:"}

// liveView measures the live view at a websocket client: input → changed update (version 2,
// next to version 1 in the same run), pointer move → pointer message, sustained fps and
// message size while the screen changes, and bytes per second while it does not.
func (r *runner) liveView(ctx context.Context, d *desktop) error {
	ls, err := r.startLive(ctx, d, d.client, "live.db")
	if err != nil {
		return err
	}
	defer ls.close()
	c, err := dialLive(ctx, ls, dialOptions{v2: true})
	if err != nil {
		return err
	}
	defer c.close()
	if _, err := c.frameAfter(ctx, 0, 15*time.Second); err != nil {
		return fmt.Errorf("first frame: %w", err)
	}
	v1, err := dialLive(ctx, ls, dialOptions{})
	if err != nil {
		return err
	}
	defer v1.close()
	if _, err := v1.frameAfter(ctx, 0, 15*time.Second); err != nil {
		return fmt.Errorf("first version 1 frame: %w", err)
	}

	// Input → changed frame, in blocks alternating between the protocols (taking over on the
	// other connection ends the previous lease).
	var lat, lat1 []float64
	n := max(r.cfg.Counts.LiveInputs, 2)
	for block := 0; block < 4; block++ {
		cl, into := c, &lat
		if block%2 == 1 {
			cl, into = v1, &lat1
		}
		lease, err := cl.takeOver(ctx)
		if err != nil {
			return err
		}
		samples, err := inputLatency(ctx, cl, lease, (n+1)/2, block < 2)
		if err != nil {
			return err
		}
		*into = append(*into, samples...)
	}
	r.add(Row{ID: "live_input", Title: "live view: input → changed frame at the websocket client", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "version 2 (what the UI speaks): input message over the computer websocket (lease-checked) → driver → xfdesktop's menu opens (right click) or closes (Escape) → " +
			"region stream → screen hub → update message read by the client; 300 ms quiet between inputs", Samples: lat},
		PeerName: "v1 frames", Peer: &Side{Method: "the same through version 1 (whole JPEG frames), alternating blocks on another connection of the same server", Samples: lat1}})
	v1.close() // its stream would compete for the CPU below

	// Pointer move → pointer message.
	lease, err := c.takeOver(ctx)
	if err != nil {
		return err
	}
	var ptr []float64
	for i := -1; i < n; i++ {
		x, y := 500+(i&1)*37, 300+(i&1)*23
		msg := map[string]any{"type": "input", "token": lease["token"], "version": lease["version"], "frameId": c.newest.Load(),
			"action": "move", "x": x, "y": y}
		start := time.Now()
		if err := c.send(msg); err != nil {
			return err
		}
		at, err := c.pointerAt(ctx, x, y, 5*time.Second)
		if err != nil {
			return err
		}
		if i >= 0 {
			ptr = append(ptr, ms(at.Sub(start)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.add(Row{ID: "live_pointer", Title: "live view: pointer move → pointer message at the client", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "input move over the version 2 websocket → driver (XTEST, then the pointer's position) → pointer report → screen hub → " +
			"pointer message read by the client (the screen is not re-encoded)", Samples: ptr}})

	// Sustained fps while a quarter of the screen keeps changing.
	actx, stopAnim := context.WithCancel(ctx)
	animDone := make(chan error, 1)
	go func() { // owned: stopAnim ends it (the driver kills the program's process group)
		_, err := d.client.Exec(actx, guest.ExecRequest{Command: animation, Timeout: 10 * time.Minute})
		animDone <- err
	}()
	endAnim := func() {
		stopAnim()
		<-animDone
	}
	// Wait until the animation runs: frames keep coming for a second.
	if err := r.waitStream(ctx, c, 30*time.Second); err != nil {
		endAnim()
		return err
	}
	var fps, sizes []float64
	window := max(r.cfg.Counts.LiveWindow, time.Second)
	end := time.Now().Add(window)
	bucket, bucketEnd := 0, time.Now().Add(time.Second)
	for time.Now().Before(end) {
		f, err := c.frameAfter(ctx, 0, 5*time.Second)
		if err != nil {
			endAnim()
			return fmt.Errorf("while the screen changes: %w", err)
		}
		for f.at.After(bucketEnd) {
			fps = append(fps, float64(bucket))
			bucket, bucketEnd = 0, bucketEnd.Add(time.Second)
		}
		bucket++
		sizes = append(sizes, float64(f.size)/1024)
	}
	endAnim()
	r.add(Row{ID: "live_fps", Title: "live view: sustained frames per second, screen changing", Unit: UnitFPS, Better: "higher",
		Ours: Side{Method: fmt.Sprintf("version 2 update messages per 1 s bucket received by the websocket client over %s while %v (640x400 plasma images every 10 ms) runs in the desktop; the channel sends at most %d per second",
			window, animation, screen.DefaultMaxFPS), Samples: fps}})
	r.add(Row{ID: "live_frame_size", Title: "live view: frame size, screen changing", Unit: UnitKiB, Better: "lower",
		Ours: Side{Method: "bytes per version 2 update message (the changed regions) received during the fps measurement", Samples: sizes}})

	// Idle: nothing changes, what still arrives (status, pings) per second.
	if err := c.quiet(ctx, time.Second, 15*time.Second); err != nil {
		return err
	}
	var idle []float64
	for range int(window / time.Second) {
		n0 := c.read.Load()
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		idle = append(idle, float64(c.read.Load()-n0))
	}
	r.add(Row{ID: "live_idle", Title: "live view: bytes per second, idle screen", Unit: UnitBPS, Better: "lower",
		Ours: Side{Method: "bytes read from the websocket's TCP connection per second while the screen does not change (after 1 s without frames)", Samples: idle}})
	return nil
}

// takeOver takes control through c and drains what arrives until the screen is quiet.
func (c *wsClient) takeOver(ctx context.Context) (map[string]any, error) {
	if err := c.send(map[string]any{"type": "take_over"}); err != nil {
		return nil, err
	}
	lease, err := c.reply(ctx)
	if err != nil {
		return nil, err
	}
	if lease["type"] != "lease" {
		return nil, fault.Unavailable("bench: take over refused: %v", lease)
	}
	return lease, c.quiet(ctx, 300*time.Millisecond, 5*time.Second)
}

// inputLatency sends inputs that change the bare desktop through c (under lease) — n
// rounded up to pairs that open and close a menu, after an unmeasured pair when warm — and
// returns how long each took to show as a changed frame.
func inputLatency(ctx context.Context, c *wsClient, lease map[string]any, n int, warm bool) ([]float64, error) {
	var lat []float64
	first := 0
	if warm {
		first = -len(liveInputs)
	}
	n = (n + len(liveInputs) - 1) / len(liveInputs) * len(liveInputs)
	for i := first; i < n; i++ {
		in := liveInputs[(i-first)%len(liveInputs)]
		after := c.newest.Load()
		msg := map[string]any{"type": "input", "token": lease["token"], "version": lease["version"], "frameId": after}
		for k, v := range in {
			msg[k] = v
		}
		start := time.Now()
		if err := c.send(msg); err != nil {
			return nil, err
		}
		f, err := c.frameAfter(ctx, after, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("after input %v: %w", in["action"], err)
		}
		if i >= 0 {
			lat = append(lat, ms(f.at.Sub(start)))
		}
		if err := c.quiet(ctx, 300*time.Millisecond, 5*time.Second); err != nil {
			return nil, err
		}
	}
	select { // an input reply is an error: the input had no effect
	case m := <-c.replies:
		return nil, fault.Unavailable("bench: an input was refused: %v", m)
	default:
	}
	return lat, nil
}

// pointerAt waits for the pointer message that puts the pointer at x,y.
func (c *wsClient) pointerAt(ctx context.Context, x, y int, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case p := <-c.pointers:
			if p.x == x && p.y == y {
				return p.at, nil
			}
		case <-t.C:
			return time.Time{}, fault.Unavailable("bench: no pointer message for %d,%d within %s", x, y, timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// waitStream waits until frames arrive steadily (10 frames without a gap of a second).
func (r *runner) waitStream(ctx context.Context, c *wsClient, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	got := 0
	for got < 10 {
		if time.Now().After(deadline) {
			return fault.Unavailable("bench: the animation (%v) did not make the screen change: is ImageMagick installed in the peers image?", animation)
		}
		_, err := c.frameAfter(ctx, 0, time.Second)
		switch {
		case err == nil:
			got++
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return err
		default:
			got = 0
		}
	}
	return nil
}
