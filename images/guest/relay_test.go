//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/images/guest/wire"
)

// echoServer accepts one connection at path and echoes it until the peer half-closes.
func echoServer(t *testing.T, path string) (accepted chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		accepted <- c
		io.Copy(c, c)
		c.(*net.UnixConn).CloseWrite()
	}()
	return accepted
}

func TestRelayCopiesBothWays(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "guest.sock")
	echoServer(t, sock)
	inR, inW := io.Pipe()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- relay(context.Background(), sock, 5*time.Second, inR, &out) }()
	data := make([]byte, 1<<20)
	rand.Read(data)
	inW.Write(data)
	inW.Close() // the host closes stdin: the relay half-closes, the echo ends, the relay ends
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("relay still runs 20 s after stdin closed")
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("relayed %d bytes back, want the %d sent", out.Len(), len(data))
	}
}

func TestRelayEndsWithTheDriver(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "guest.sock")
	accepted := echoServer(t, sock)
	inR, inW := io.Pipe()
	defer inW.Close() // stdin stays open: the driver's side ends the relay
	done := make(chan error, 1)
	go func() { done <- relay(context.Background(), sock, 5*time.Second, inR, io.Discard) }()
	c := <-accepted
	c.Close()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("relay still runs 20 s after the driver closed the connection")
	}
}

func TestRelayWaitsForTheSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "guest.sock")
	done := make(chan error, 1)
	inR, inW := io.Pipe()
	var out bytes.Buffer
	go func() { done <- relay(context.Background(), sock, 10*time.Second, inR, &out) }()
	time.Sleep(200 * time.Millisecond) // the desktop is still starting
	echoServer(t, sock)
	inW.Write([]byte("late"))
	inW.Close()
	if err := <-done; err != nil || out.String() != "late" {
		t.Fatalf("relay = %v, %q", err, out.String())
	}
	// No driver at all: a clear error after the wait.
	err := relay(context.Background(), filepath.Join(dir, "none.sock"), 100*time.Millisecond, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "is the desktop's driver running?") {
		t.Fatalf("relay without a driver: %v", err)
	}
}

// TestRelayBinary runs the built driver binary in relay mode as the exec link does (a child
// process whose stdin/stdout carry the protocol) against a real driver on Xvfb, and drives
// the driver through it with the typed client.
func TestRelayBinary(t *testing.T) {
	h := startDriver(t, 66, 320, 240)
	bin := buildDriver(t, t.TempDir())
	cmd := exec.Command(bin, wire.RelayFlag)
	cmd.Env = append(os.Environ(), wire.EnvRunDir+"="+filepath.Dir(h.socket))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := guest.NewClient(ctx, pipes{stdout, stdin}, guest.Options{Name: "relay", Heartbeat: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("handshake through the relay: %v (stderr %s)", err, stderr.String())
	}
	if hl := c.Hello(); hl.Screen != (guest.Size{Width: 320, Height: 240}) {
		t.Errorf("hello through the relay: %+v", hl)
	}
	res, err := c.Exec(ctx, guest.ExecRequest{Shell: "printf relayed; printf err >&2; exit 4"})
	if err != nil || string(res.Stdout) != "relayed" || string(res.Stderr) != "err" || res.ExitCode != 4 {
		t.Fatalf("exec through the relay: %+v %v", res, err)
	}
	f, err := c.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
	if err != nil || f.Width != 320 || len(f.Data) == 0 {
		t.Fatalf("screenshot through the relay: %d bytes, %v", len(f.Data), err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	// Closing the client closes the relay's stdin: the relay ends by itself.
	c.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("relay exit: %v (stderr %s)", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("relay still runs 20 s after the client closed")
	}
}

// pipes joins a child's stdout and stdin into one stream.
type pipes struct {
	io.ReadCloser
	w io.WriteCloser
}

func (p pipes) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipes) Close() error                { return errors.Join(p.w.Close(), p.ReadCloser.Close()) }

// TestSocketRecreated deletes the driver's socket while it runs (and once replaces it by a
// plain file): the driver listens again at the path, a connection opened before keeps
// working, and new connections succeed.
func TestSocketRecreated(t *testing.T) {
	h := startDriver(t, 67, 320, 240)
	for _, damage := range []struct {
		name string
		do   func() error
	}{
		{"deleted", func() error { return os.Remove(h.socket) }},
		{"replaced by a file", func() error {
			os.Remove(h.socket)
			return os.WriteFile(h.socket, []byte("not a socket"), 0o644)
		}},
	} {
		t.Run(damage.name, func(t *testing.T) {
			if err := damage.do(); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client.Health(context.Background()); err != nil {
				t.Fatalf("the open connection broke: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := guest.WaitReady(ctx, h.socket)
			if err != nil {
				t.Fatalf("no new connection after the socket was %s: %v", damage.name, err)
			}
			defer c.Close()
			if _, err := c.Health(ctx); err != nil {
				t.Fatalf("health on the new connection: %v", err)
			}
		})
	}
	if err := h.client.Ping(context.Background()); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

func TestSockListenerClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := listenSocket(path, 10*time.Millisecond, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket %v %v, want mode 0666", fi, err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		_, err = l.Accept()
		accepted <- err
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	l.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("socket left after Close: %v", err)
	}
	l.Close() // idempotent
}
