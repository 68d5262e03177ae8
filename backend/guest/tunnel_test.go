package guest_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/guest/guesttest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	guesttest.Cleanup()
	os.Exit(code)
}

// TestTunnel runs the real driver and opens tunnels through its socket: bytes flow both ways
// to a loopback TCP server (as to Chromium's DevTools port in a browser container), the
// connection carries nothing else, and non-loopback targets and dead ports are refused.
func TestTunnel(t *testing.T) {
	drv := guesttest.Start(t, ":76", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // an upper-casing echo server
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					io.WriteString(c, strings.ToUpper(line))
				}
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Two tunnels at once, each its own stream.
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := guest.DialTunnel(ctx, drv.Socket, ln.Addr().String())
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	big := strings.Repeat("abcdefghij", 100<<10/10) // 100 KiB on one line
	for i, c := range conns {
		msg := "hello " + string(rune('a'+i)) + " " + big + "\n"
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || got != strings.ToUpper(msg) {
			t.Fatalf("tunnel %d echoed %d bytes (%v), want %d", i, len(got), err, len(msg))
		}
	}

	// The driver still answers ordinary clients next to the tunnels.
	cl, err := guest.Dial(ctx, drv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if h := cl.Hello(); len(h.Features) == 0 || h.Features[0] != guest.FeatureTunnel {
		t.Fatalf("hello features = %v", h.Features)
	}

	for _, tc := range []struct {
		addr  string
		class error
	}{
		{"10.1.2.3:80", fault.ErrForbidden},
		{"example.com:443", fault.ErrForbidden},
		{"nonsense", fault.ErrInvalid},
		{"127.0.0.1:1", fault.ErrUnavailable}, // nothing listens
	} {
		if _, err := guest.DialTunnel(ctx, drv.Socket, tc.addr); !errors.Is(err, tc.class) {
			t.Errorf("tunnel to %s: %v, want class %v", tc.addr, err, tc.class)
		}
	}

	// Closing the host side closes the target side.
	c := conns[0]
	c.Close()
	if _, err := io.WriteString(conns[1], "still\n"); err != nil {
		t.Fatal(err)
	}
	if got, _ := bufio.NewReader(conns[1]).ReadString('\n'); got != "STILL\n" {
		t.Fatalf("the other tunnel after one closed: %q", got)
	}
}
