package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sync"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/link"
	"cubicle/images/guest/wire"
)

// The fake engine runs a fake in-guest driver in each running container: it speaks the real
// bridge protocol (handshake, ping, health, screenshot, exec — which echoes its shell line)
// over the socket transport (SocketTransport: only for a container that bind-mounts the
// socket's directory at the run directory, so the mount wiring is checked) and over exec
// sessions (ExecAttach of the relay command, with the engines' multiplexed output framing).
// KillDriver makes a container's driver die as a crashed PID 1 would; starting the container
// again brings it back.

// SetBlank makes the fake drivers' screenshots a single colour (true) or a gradient.
func (f *Engine) SetBlank(blank bool) { f.mu.Lock(); f.blank = blank; f.mu.Unlock() }

// KillDriver ends the driver of container name: its links close and new ones fail until the
// container is started again. The container stays "running" (as when a driver hangs or its
// socket is gone while the engine has not noticed).
func (f *Engine) KillDriver(name string) {
	f.mu.Lock()
	c, err := f.find(name)
	var conns []net.Conn
	if err == nil {
		c.driverDead = true
		conns, c.conns = c.conns, nil
	}
	f.mu.Unlock()
	for _, cn := range conns {
		cn.Close()
	}
}

// DriverLinks returns how many driver connections container name has open.
func (f *Engine) DriverLinks(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(name)
	if err != nil {
		return 0
	}
	n := 0
	for _, cn := range c.conns {
		if cn != nil {
			n++
		}
	}
	return n
}

// endDriver closes c's driver connections (the container stopped); f.mu is held.
func (c *Container) endDriver() {
	for _, cn := range c.conns {
		cn.Close()
	}
	c.conns = nil
}

// SocketTransport is the socket transport of the fake engine.
func (f *Engine) SocketTransport() link.Transport { return socketTransport{f} }

type socketTransport struct{ f *Engine }

func (socketTransport) Name() string { return link.NameSocket }

func (s socketTransport) Open(ctx context.Context, t link.Target) (net.Conn, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.ctrs {
		mounted := slices.ContainsFunc(c.Spec.Mounts, func(m engine.Mount) bool {
			return m.Source == filepath.Dir(t.Socket) && m.Target == wire.RunDir
		})
		if mounted && c.State.Running && !c.driverDead {
			host, drv := net.Pipe()
			c.conns = append(c.conns, drv)
			go f.serveDriver(drv, drv, f.blank)
			return host, nil
		}
	}
	return nil, fault.Unavailable("desktop driver: nothing answers at %s", t.Socket)
}

// ExecAttach runs the relay of a running container's driver, or any other command of the
// fake's set (proc.go); fault.ErrConflict when the container does not run (or is paused).
func (f *Engine) ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "exec")
	c, err := f.find(id)
	if err != nil {
		return nil, err
	}
	if !c.State.Running {
		return nil, fault.Conflict("container %s is not running", id)
	}
	if !slices.Equal(spec.Command, wire.RelayCommand()) {
		return f.execCommand(c, spec)
	}
	host, drv := net.Pipe()
	c.conns = append(c.conns, drv)
	out := &framer{w: drv}
	if c.driverDead {
		go io.Copy(io.Discard, drv) // the host's hello
		go func() {
			out.frame(2, []byte("cubicle-guest: relay: connect to the driver at /run/cubicle/guest.sock: no such file or directory\n"))
			drv.Close()
		}()
	} else {
		go f.serveDriver(drv, out, f.blank)
	}
	return engine.NewExecStream(host, nil), nil
}

// framer writes the engines' multiplexed exec output: 8-byte headers (stream, 0, 0, 0,
// big-endian length), as a relay's stdout arrives at the host.
type framer struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *framer) frame(stream byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	hdr := make([]byte, 8, 8+len(p))
	hdr[0] = stream
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(p)))
	_, err := f.w.Write(append(hdr, p...))
	return err
}

func (f *framer) Write(p []byte) (int, error) {
	if err := f.frame(1, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// serveDriver answers the protocol read from r on w until r ends.
func (f *Engine) serveDriver(r io.ReadCloser, w io.Writer, blank bool) {
	defer r.Close()
	br := bufio.NewReader(r)
	var wmu sync.Mutex
	reply := func(id uint64, result any, blob []byte, werr *wire.WireError) {
		raw, _ := json.Marshal(result)
		var buf bytes.Buffer
		wire.WriteMessage(&buf, &wire.Envelope{ID: id, Result: raw, Error: werr}, blob)
		wmu.Lock()
		w.Write(buf.Bytes()) // one write: one frame on the exec link
		wmu.Unlock()
	}
	size := wire.Size{Width: 64, Height: 48}
	for {
		var env wire.Envelope
		blob, err := wire.ReadMessage(br, &env)
		if err != nil {
			return
		}
		switch env.Op {
		case wire.OpHello:
			reply(env.ID, wire.Hello{Protocol: wire.ProtocolVersion, Driver: "fake-1", Screen: size}, nil, nil)
		case wire.OpPing:
			reply(env.ID, struct{}{}, nil, nil)
		case wire.OpHealth:
			reply(env.ID, wire.Health{XServer: true, Session: true, Screen: size}, nil, nil)
		case wire.OpScreenshot, wire.OpWaitSettled:
			png := screenPNG(blank)
			reply(env.ID, wire.Frame{ID: 1, Width: 64, Height: 48, Format: "png"}, png, nil)
		case wire.OpExec:
			var r wire.ExecRequest
			json.Unmarshal(env.Args, &r)
			out := []byte(r.Shell)
			reply(env.ID, wire.ExecResult{StdoutLen: len(out)}, out, nil)
		case wire.OpCancel:
		default:
			_ = blob
			reply(env.ID, nil, nil, &wire.WireError{Code: wire.CodeInvalid, Message: "the fake driver does not do " + env.Op})
		}
	}
}

// screenPNG is a 64x48 PNG: a gradient, or one colour when blank.
func screenPNG(blank bool) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for y := 0; y < 48; y++ {
		for x := 0; x < 64; x++ {
			c := color.RGBA{20, 30, 40, 255}
			if !blank {
				c = color.RGBA{uint8(x * 4), uint8(y * 5), uint8(x + y), 255}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	return buf.Bytes()
}
