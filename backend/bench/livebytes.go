package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// The live view's bytes: what one viewer is sent per second while a terminal prints the time
// ten times a second, and while a browser scrolls a long page — ours (version 2), the
// version 1 full-frame stream and x11vnc (with what noVNC asks for) serving the same desktop
// at the same time, each counted on its connection the same way (bytes read per second).
// And the frame rate a viewer behind a 10 Mbit/s, 40 ms link sees while the whole screen
// changes, version 2 against version 1.

// program runs a command in the desktop until stop is called (the driver kills its process
// group), the way a person's program runs there.
func program(ctx context.Context, c *guest.Client, shell string) (stop func()) {
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned: stop ends it
		defer close(done)
		c.Exec(pctx, guest.ExecRequest{Shell: shell, Timeout: 30 * time.Minute})
	}()
	return func() {
		cancel()
		<-done
	}
}

// x11vncPort is where x11vnc listens inside the desktop (its loopback only).
const x11vncPort = "127.0.0.1:5900"

// startX11VNC runs x11vnc (from the peers image) on the desktop's display, listening on the
// desktop's own loopback, and returns how to connect to it: through a tunnel of the driver
// (guest.DialTunnel), the way the product reaches a desktop's ports whatever the transport.
func (r *runner) startX11VNC(ctx context.Context, d *desktop) (func(context.Context) (net.Conn, error), func(), error) {
	sock := r.fleet.m.SocketPath(d.instance)
	dial := func(ctx context.Context) (net.Conn, error) { return guest.DialTunnel(ctx, sock, x11vncPort) }
	stop := program(ctx, d.client, "exec x11vnc -display :0 -localhost -rfbport 5900 -nopw -forever -shared -quiet -noipv6 "+
		">/tmp/cubicle-bench-x11vnc.log 2>&1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := dial(ctx)
		if err == nil {
			c.Close()
			return dial, stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			log, _ := d.client.Exec(ctx, guest.ExecRequest{Shell: "tail -5 /tmp/cubicle-bench-x11vnc.log"})
			return nil, nil, fault.Unavailable("bench: x11vnc did not start (is it in the peers image?): %v: %s", err,
				strings.TrimSpace(string(log.Stdout)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// byteSide is one way of watching the screen whose bytes per second are counted.
type byteSide struct {
	name string
	open func(ctx context.Context) (read func() int64, close func(), err error)
}

// bytesPerSecond opens each side in turn, lets it take its first (whole) picture, then counts
// the bytes that arrive in each second of window; sides take turns for rounds, so load
// changes hit all alike. It returns the samples of each side, by name.
func (r *runner) bytesPerSecond(ctx context.Context, sides []byteSide, rounds int, window time.Duration) (map[string][]float64, error) {
	out := map[string][]float64{}
	for round := 0; round < rounds; round++ {
		for _, s := range sides {
			read, closeSide, err := s.open(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			// The first picture is the whole screen; what is measured is what follows.
			if err := sleepCtx(ctx, 2*time.Second); err != nil {
				closeSide()
				return nil, err
			}
			for range int(window / time.Second) {
				n0 := read()
				if err := sleepCtx(ctx, time.Second); err != nil {
					closeSide()
					return nil, err
				}
				out[s.name] = append(out[s.name], float64(read()-n0))
			}
			closeSide()
		}
	}
	return out, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// liveBytes measures live_bytes_terminal and live_bytes_scroll.
func (r *runner) liveBytes(ctx context.Context, d *desktop) error {
	ls, err := r.startLive(ctx, d, d.client, "live-"+newID()+".db")
	if err != nil {
		return err
	}
	defer ls.close()
	dialVNC, stopVNC, err := r.startX11VNC(ctx, d)
	if err != nil {
		return err
	}
	defer stopVNC()
	ws := func(v2 bool) func(context.Context) (func() int64, func(), error) {
		return func(ctx context.Context) (func() int64, func(), error) {
			c, err := dialLive(ctx, ls, dialOptions{v2: v2})
			if err != nil {
				return nil, nil, err
			}
			return c.read.Load, c.close, nil
		}
	}
	rfb := func(ctx context.Context) (func() int64, func(), error) {
		c, err := dialRFB(ctx, dialVNC)
		if err != nil {
			return nil, nil, err
		}
		return func() int64 {
			if err := c.alive(); err != nil {
				r.log.Warn("the RFB client stopped following x11vnc", "err", err)
			}
			return c.read.Load()
		}, c.close, nil
	}
	if err := r.firstFrames(ctx, ls, dialVNC); err != nil {
		return err
	}
	sides := []byteSide{{"ours", ws(true)}, {"v1", ws(false)}, {"x11vnc", rfb}}
	rounds, window := 1, 3*time.Second
	if !r.cfg.Quick {
		rounds, window = 3, 4*time.Second
	}
	row := func(id, title, what string, got map[string][]float64) Row {
		return Row{ID: id, Title: title, Unit: UnitBPS, Better: "lower",
			Ours: Side{Method: "version 2 (regions, what the UI speaks): bytes read per second from one viewer's websocket TCP connection while " + what +
				"; each viewer connects, skips its first 2 s (the whole screen), then counts " + window.String() + "; the three viewers take turns", Samples: got["ours"]},
			PeerName: "x11vnc", Peer: &Side{Method: "x11vnc 0.9 on the same display (in the desktop, reached through a tunnel of the driver) to an RFB client asking for what noVNC asks " +
				"(CopyRect, Tight with JPEG quality 6 and compression 2, rich cursor, an incremental request after each update); bytes read per second the same way", Samples: got["x11vnc"]},
			Others: []OtherPeer{{Name: "v1 frames", Side: Side{Method: "version 1 of the computer channel (a whole JPEG q75 frame per change, at most 30 per second), counted the same way", Samples: got["v1"]}}}}
	}

	// A terminal printing the time ten times a second.
	r.progress("  a terminal running watch -n 0.1 date")
	stop := program(ctx, d.client, "exec xfce4-terminal --disable-server --geometry 80x24+100+100 -x watch -n 0.1 date +%T.%N")
	if err := sleepCtx(ctx, 4*time.Second); err != nil {
		stop()
		return err
	}
	got, err := r.bytesPerSecond(ctx, sides, rounds, window)
	stop()
	if err != nil {
		return err
	}
	r.add(row("live_bytes_terminal", "live view: bytes per second, a terminal printing the time 10×/s", "xfce4-terminal runs `watch -n 0.1 date +%T.%N`", got))

	// A browser scrolling a long page.
	r.progress("  a browser scrolling a long page")
	if err := d.client.WriteFile(ctx, scrollPagePath, []byte(scrollPage()), 0o644); err != nil {
		return err
	}
	stop = program(ctx, d.client, "exec chromium --no-first-run --no-default-browser-check --disable-gpu --user-data-dir=/tmp/cubicle-bench-chromium "+
		"--window-position=0,0 --window-size=1280,760 --app=file://"+scrollPagePath)
	defer stop()
	if err := r.waitChanging(ctx, ls, 60*time.Second); err != nil {
		return fmt.Errorf("the page does not scroll: %w", err)
	}
	got, err = r.bytesPerSecond(ctx, sides, rounds, window)
	if err != nil {
		return err
	}
	r.add(row("live_bytes_scroll", "live view: bytes per second, a browser scrolling a long page", "Chromium scrolls a long page of text and pictures continuously (4 px per animation frame)", got))
	return nil
}

// RowLiveFirstFrame: a viewer connects → the whole screen drawn (issue 28: opening the panel
// → first full frame, target LiveFirstFrameTarget p50).
const (
	RowLiveFirstFrame    = "live_first_frame"
	LiveFirstFrameTarget = 300 * time.Millisecond
)

// firstFrames measures live_first_frame: a new version 2 viewer of the computer channel
// (websocket, login, lease-free view) to its first whole-screen update (a keyframe), next to
// a new RFB client of x11vnc on the same display to its first framebuffer update (the answer
// to its non-incremental request for the whole screen), alternating, on an idle screen.
func (r *runner) firstFrames(ctx context.Context, ls *liveServer, dialVNC func(context.Context) (net.Conn, error)) error {
	n := max(r.cfg.Counts.LiveInputs/2, 3)
	var ours, peer []float64
	for i := -1; i < n; i++ { // one round unmeasured
		start := time.Now()
		c, err := dialLive(ctx, ls, dialOptions{v2: true})
		if err != nil {
			return err
		}
		f, err := c.frameAfter(ctx, 0, 15*time.Second)
		c.close()
		if err != nil {
			return fmt.Errorf("a new viewer's first frame: %w", err)
		}
		if !f.key {
			return fmt.Errorf("a new viewer's first update is not a whole-screen keyframe (%d bytes)", f.size)
		}
		o := ms(f.at.Sub(start))

		start = time.Now()
		v, err := dialRFB(ctx, dialVNC)
		if err != nil {
			return err
		}
		deadline := time.Now().Add(15 * time.Second)
		for v.updates.Load() == 0 {
			if err := v.alive(); err != nil || time.Now().After(deadline) {
				v.close()
				return fmt.Errorf("x11vnc's first framebuffer update: %v (none within 15 s)", err)
			}
			time.Sleep(200 * time.Microsecond)
		}
		p := ms(time.Since(start))
		v.close()
		if i >= 0 {
			ours, peer = append(ours, o), append(peer, p)
		}
	}
	verdict := "met"
	if Summarize(ours).P50 > ms(LiveFirstFrameTarget) {
		verdict = "missed"
	}
	r.add(Row{ID: RowLiveFirstFrame, Title: "live view: a new viewer → the whole screen drawn", Unit: UnitMS, Better: "lower",
		Ours:     Side{Method: "a new version 2 viewer (what the panel opens): websocket dial with the session token → the first whole-screen keyframe read by the client; idle screen", Samples: ours},
		PeerName: "x11vnc", Peer: &Side{Method: "a new RFB client of x11vnc 0.9 on the same display (in the desktop, through a tunnel of the driver): TCP, RFB 3.8 handshake, noVNC's encodings, " +
			"its request for the whole screen → the first framebuffer update read; alternating with ours", Samples: peer},
		Target: fmt.Sprintf("target ≤ %.0f ms p50: %s", ms(LiveFirstFrameTarget), verdict)})
	return nil
}

// waitChanging waits until a viewer sees the screen change steadily (the program started).
func (r *runner) waitChanging(ctx context.Context, ls *liveServer, limit time.Duration) error {
	c, err := dialLive(ctx, ls, dialOptions{v2: true})
	if err != nil {
		return err
	}
	defer c.close()
	if _, err := c.frameAfter(ctx, 0, 15*time.Second); err != nil {
		return err
	}
	return r.waitStream(ctx, c, limit)
}

const scrollPagePath = "/tmp/cubicle-bench-scroll.html"

// scrollPage is a long page of text and coloured figures that scrolls itself, 4 px per
// animation frame, and starts over at the end.
func scrollPage() string {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>scroll</title><style>
body{font:16px/1.5 sans-serif;margin:0 auto;max-width:900px;padding:20px;color:#222;background:#fff}
h2{color:#246;margin-top:1.6em}.fig{height:160px;border-radius:8px;margin:12px 0}
</style></head><body>`)
	words := strings.Fields("the agent opens the browser reads the page clicks a link waits for the screen to settle and types into the field while a person watches the desktop live and takes over when needed")
	for i := 0; i < 120; i++ {
		fmt.Fprintf(&b, "<h2>Section %d</h2><p>", i+1)
		for j := 0; j < 90; j++ {
			b.WriteString(words[(i*7+j*3)%len(words)])
			b.WriteByte(' ')
		}
		b.WriteString("</p>")
		if i%3 == 0 {
			fmt.Fprintf(&b, `<div class="fig" style="background:linear-gradient(%ddeg,hsl(%d,70%%,60%%),hsl(%d,70%%,40%%))"></div>`, i*37%360, i*53%360, i*97%360)
		}
	}
	b.WriteString(`<script>
function step(){ if (window.scrollY + innerHeight >= document.body.scrollHeight - 4) window.scrollTo(0, 0); else window.scrollBy(0, 4); requestAnimationFrame(step); }
requestAnimationFrame(step);
</script></body></html>`)
	return b.String()
}

// fullScreenAnimation keeps the whole screen changing like a video: ImageMagick's animate
// cycling three 1280x800 plasma images every 30 ms over the whole desktop.
var fullScreenAnimation = []string{"animate", "-delay", "3", "-size", "1280x800", "-geometry", "+0+0", "plasma:", "plasma:", "plasma:"}

// liveThrottled measures live_fps_throttled: the frames a viewer behind a 10 Mbit/s link with
// a 40 ms round trip sees while the whole screen changes, version 2 (flow control and
// quality levels) against version 1.
func (r *runner) liveThrottled(ctx context.Context, d *desktop) error {
	ls, err := r.startLive(ctx, d, d.client, "live-"+newID()+".db")
	if err != nil {
		return err
	}
	defer ls.close()
	link, err := newSlowLink(ls.addr, 10e6, 20*time.Millisecond)
	if err != nil {
		return fault.Unavailable("bench: start the emulated link: %v", err)
	}
	defer link.close()
	actx, stopAnim := context.WithCancel(ctx)
	animDone := make(chan struct{})
	go func() { // owned: stopAnim ends it
		defer close(animDone)
		d.client.Exec(actx, guest.ExecRequest{Command: fullScreenAnimation, Timeout: 30 * time.Minute})
	}()
	defer func() { stopAnim(); <-animDone }()
	if err := r.waitChanging(ctx, ls, 60*time.Second); err != nil {
		return err
	}
	window := max(r.cfg.Counts.LiveWindow, 3*time.Second)
	count := func(v2 bool) ([]float64, error) {
		c, err := dialLive(ctx, ls, dialOptions{v2: v2, via: link.addr()})
		if err != nil {
			return nil, err
		}
		defer c.close()
		if _, err := c.frameAfter(ctx, 0, 30*time.Second); err != nil {
			return nil, err
		}
		// Flow control settles on a quality level within a few seconds.
		if err := sleepCtx(ctx, 5*time.Second); err != nil {
			return nil, err
		}
		for drained := false; !drained; {
			select {
			case <-c.frames:
			default:
				drained = true
			}
		}
		var fps []float64
		for range int(window / time.Second) {
			n := 0
			end := time.After(time.Second)
			for counting := true; counting; {
				select {
				case _, ok := <-c.frames:
					if !ok {
						return nil, errors.New("bench: the channel closed")
					}
					n++
				case <-end:
					counting = false
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			fps = append(fps, float64(n))
		}
		return fps, nil
	}
	ours, err := count(true)
	if err != nil {
		return fmt.Errorf("version 2 behind the link: %w", err)
	}
	v1, err := count(false)
	if err != nil {
		return fmt.Errorf("version 1 behind the link: %w", err)
	}
	r.add(Row{ID: "live_fps_throttled", Title: "live view: frames per second through a 10 Mbit/s, 40 ms link, whole screen changing", Unit: UnitFPS, Better: "higher",
		Ours: Side{Method: fmt.Sprintf("version 2 messages per second at a viewer connected through an emulated link (10 Mbit/s each way, 20 ms each way: a relay that reads only as fast as the link carries; "+
			"this kernel has no tc netem) while %v covers the screen; counted %s after 5 s for flow control to settle", fullScreenAnimation, window), Samples: ours},
		PeerName: "v1 frames", Peer: &Side{Method: "version 1 (whole JPEG q75 frames) through the same link, counted the same way right after", Samples: v1}})
	return nil
}
