package wire

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
)

// BenchmarkRelayRoundTrip times one request/reply round trip to an echo server on a unix
// socket (standing for a desktop's driver): "direct" connects to it, as the server reaches a
// local desktop's driver; "relay" goes the runner relay's way — a yamux stream over Conn over a
// websocket on loopback TCP, the far end piping the stream into its own connection to the
// socket, as runner.serve does for OpGuest. The difference is what the relay's transport adds
// to a guest call; `cubicle bench`'s runner_exec row measures it with a real runner and driver.
//
//	go test ./runner/wire -run '^$' -bench RelayRoundTrip -benchtime 2000x
func BenchmarkRelayRoundTrip(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "echo.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() { // the "driver": echoes every connection
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()

	// The server upgrades and opens streams (yamux client); the runner dials and serves them
	// (yamux server), piping each into a connection of its own to the "driver".
	up := websocket.Upgrader{ReadBufferSize: BufferSize, WriteBufferSize: BufferSize}
	sessions := make(chan *yamux.Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s, err := yamux.Client(NewConn(ws), SessionConfig())
		if err != nil {
			return
		}
		sessions <- s
	}))
	defer srv.Close()
	d := websocket.Dialer{ReadBufferSize: BufferSize, WriteBufferSize: BufferSize}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	runner, err := yamux.Server(NewConn(ws), SessionConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer runner.Close()
	go func() {
		for {
			st, err := runner.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				d, err := net.Dial("unix", sock)
				if err != nil {
					st.Close()
					return
				}
				go func() { io.Copy(d, st); d.Close() }()
				io.Copy(st, d)
				st.Close()
			}()
		}
	}()
	sess := <-sessions
	defer sess.Close()

	for _, size := range []int{100, 32 << 10} {
		msg := bytes.Repeat([]byte("x"), size)
		run := func(b *testing.B, c net.Conn) {
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(sizeName(size)+"/direct", func(b *testing.B) {
			c, err := net.Dial("unix", sock)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			run(b, c)
		})
		b.Run(sizeName(size)+"/relay", func(b *testing.B) {
			st, err := sess.OpenStream()
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			run(b, st)
		})
	}
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
