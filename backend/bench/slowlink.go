package bench

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// slowLink emulates a slow network path in front of a TCP server: it accepts connections on a
// loopback port and relays each to the server, carrying at most rate bytes per second in each
// direction and delivering every byte delay after the link took it (so a round trip costs
// 2 × delay on top). It reads from either side only as fast as the link carries, with small
// socket buffers, so the sender's own socket holds what the link has not taken yet — the way
// a real bottleneck pushes back. This is what `tc qdisc … netem delay D rate R` on both ends
// of a veth pair does; this machine's kernel has no netem (sch_netem), and the relay needs
// neither root nor Linux.
type slowLink struct {
	ln     net.Listener
	target string
	rate   atomic.Uint64 // bytes per second, each direction (math.Float64bits)
	delay  time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // guarded by mu
}

// newSlowLink starts a link to target (host:port) at rate bits per second with a one-way
// delay; close it.
func newSlowLink(target string, bitsPerSecond float64, delay time.Duration) (*slowLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &slowLink{ln: ln, target: target, delay: delay, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	l.setRate(bitsPerSecond)
	l.wg.Add(1)
	go l.accept() // owned: close ends it
	return l, nil
}

// setRate changes the link's rate (bits per second) from now on.
func (l *slowLink) setRate(bitsPerSecond float64) { l.rate.Store(math.Float64bits(bitsPerSecond / 8)) }

func (l *slowLink) bytesPerSecond() float64 { return math.Float64frombits(l.rate.Load()) }

// addr is where clients connect instead of the server.
func (l *slowLink) addr() string { return l.ln.Addr().String() }

func (l *slowLink) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *slowLink) accept() {
	defer l.wg.Done()
	for {
		client, err := l.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", l.target)
		if err != nil {
			client.Close()
			continue
		}
		if !l.track(client) || !l.track(server) {
			client.Close()
			server.Close()
			return
		}
		for _, c := range []net.Conn{client, server} {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetReadBuffer(16 << 10)
				tc.SetWriteBuffer(16 << 10)
				tc.SetNoDelay(true)
			}
		}
		l.wg.Add(2)
		go l.pump(server, client) // owned: ends when either side closes (close closes both)
		go l.pump(client, server)
	}
}

// chunk is bytes on the link, due at the far end at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pump carries src → dst: a reader that takes bytes at the link's rate and a writer that
// delivers each chunk at its due time.
func (l *slowLink) pump(src, dst net.Conn) {
	defer l.wg.Done()
	defer src.Close()
	defer dst.Close()
	line := make(chan chunk, 256)
	done := make(chan struct{})
	go func() { // owned by pump: ends when line is closed
		defer close(done)
		for c := range line {
			if wait := time.Until(c.due); wait > 0 {
				time.Sleep(wait)
			}
			if _, err := dst.Write(c.data); err != nil {
				src.Close() // stops the reader too
				for range line {
				}
				return
			}
		}
	}()
	defer func() { close(line); <-done }()
	var free time.Time // when the link has sent everything taken so far
	buf := make([]byte, 64<<10)
	for {
		// Take no more than the link can send now: the rest waits in the sender's socket. A
		// sleep that overshoots (a busy machine) is made up by taking more at once, within a
		// few milliseconds' worth, so the link keeps its rate.
		now := time.Now()
		if lag := now.Add(-linkCatchUp); free.Before(lag) {
			free = lag
		}
		if ahead := free.Sub(now); ahead > time.Millisecond {
			time.Sleep(ahead)
			continue
		}
		rate := l.bytesPerSecond()
		allow := int(now.Add(time.Millisecond).Sub(free).Seconds() * rate)
		allow = min(max(allow, 1024), len(buf))
		n, err := src.Read(buf[:allow])
		if n > 0 {
			free = free.Add(time.Duration(float64(n) / rate * float64(time.Second)))
			sent := free
			if t := time.Now(); sent.Before(t) {
				sent = t
			}
			select {
			case line <- chunk{data: append([]byte(nil), buf[:n]...), due: sent.Add(l.delay)}:
			case <-l.ctx.Done():
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// linkCatchUp is how far behind its schedule the link may fall and still catch up.
const linkCatchUp = 20 * time.Millisecond

// close stops the link and every connection through it, and waits for its goroutines.
func (l *slowLink) close() error {
	l.cancel()
	err := l.ln.Close()
	l.mu.Lock()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
