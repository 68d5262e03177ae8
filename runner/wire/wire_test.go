package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"cubicle/backend/fault"
)

func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, Request{Op: OpStatus}); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("raw bytes after the frame")
	var req Request
	if err := ReadFrame(&buf, &req); err != nil || req.Op != OpStatus {
		t.Fatalf("read %+v, %v", req, err)
	}
	if rest, _ := io.ReadAll(&buf); string(rest) != "raw bytes after the frame" {
		t.Fatalf("ReadFrame read past its frame: %q left", rest)
	}
	// An announced length over the limit is refused before anything is allocated.
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], MaxFrame+1)
	if err := ReadFrame(bytes.NewReader(hdr[:]), &req); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("oversized frame: %v", err)
	}
	// A truncated frame is an error, not a partial message.
	buf.Reset()
	WriteFrame(&buf, Request{Op: OpPing})
	if err := ReadFrame(bytes.NewReader(buf.Bytes()[:buf.Len()-1]), &req); err == nil {
		t.Fatal("a truncated frame was read")
	}
}

func TestErrorClassesCrossTheLink(t *testing.T) {
	for _, class := range []error{fault.ErrNotFound, fault.ErrExists, fault.ErrConflict, fault.ErrInvalid, fault.ErrForbidden,
		fault.ErrUnauthenticated, fault.ErrUnavailable} {
		e := ErrorOf(fault.New(class, "desktop %s is busy", "x"))
		got := e.Err()
		if !errors.Is(got, class) || got.Error() != "desktop x is busy" {
			t.Errorf("%v: crossed as %v (%v)", class, got, fault.Class(got))
		}
	}
	plain := ErrorOf(errors.New("boom")).Err()
	if fault.Class(plain) != nil || plain.Error() != "boom" {
		t.Fatalf("unclassified error: %v", plain)
	}
	if ErrorOf(nil) != nil || (*Error)(nil).Err() != nil {
		t.Fatal("nil errors")
	}
	if (&Error{Class: "made-up", Message: "m"}).Err().Error() != "m" {
		t.Fatal("unknown class")
	}
}

// TestSessionOverWebsocket runs yamux over Conn on a real websocket: streams both ways,
// messages larger than one websocket frame, and the far end's close ending every stream.
func TestSessionOverWebsocket(t *testing.T) {
	up := websocket.Upgrader{}
	accepted := make(chan *yamux.Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s, err := yamux.Server(NewConn(ws), SessionConfig())
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- s
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	client, err := yamux.Client(NewConn(ws), SessionConfig())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	echo := make(chan error, 1)
	go func() {
		st, err := server.AcceptStream()
		if err != nil {
			echo <- err
			return
		}
		_, err = io.Copy(st, st)
		st.Close()
		echo <- err
	}()
	st, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 256<<10/16) // 256 KiB: many websocket messages
	go func() {
		st.Write(big)
		st.Close() // yamux: a half close, the reply can still be read
	}()
	got, err := io.ReadAll(st)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("echo: %d bytes, %v", len(got), err)
	}
	if err := <-echo; err != nil {
		t.Fatal(err)
	}
	// The far end goes away: the session ends and a stream cannot be opened.
	st2, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	server.Close()
	if _, err := st2.Read(make([]byte, 1)); err == nil {
		t.Fatal("a stream outlived its session")
	}
	<-client.CloseChan()
}

// TestConnJoinsHeaderAndBody: a yamux data frame's header and body go out as one websocket
// message; other frames, and a header whose body does not follow, are sent as written.
func TestConnJoinsHeaderAndBody(t *testing.T) {
	up := websocket.Upgrader{}
	got := make(chan []byte, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			_, m, err := ws.ReadMessage()
			if err != nil {
				close(got)
				return
			}
			got <- m
		}
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(ws)
	hdr := func(typ byte, length uint32) []byte {
		h := make([]byte, 12)
		h[1] = typ
		binary.BigEndian.PutUint32(h[4:], 7) // stream id
		binary.BigEndian.PutUint32(h[8:], length)
		return h
	}
	writes := [][]byte{
		hdr(1, 4096),               // a window update: no body follows
		hdr(0, 5), []byte("hello"), // a data frame: one message
		hdr(0, 5), []byte("abc"), // a body of another length: two messages
		hdr(0, 0), // a data header without a body
		[]byte("raw"),
	}
	for _, w := range writes {
		if n, err := c.Write(w); err != nil || n != len(w) {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	c.Close()
	want := [][]byte{hdr(1, 4096), append(hdr(0, 5), "hello"...), hdr(0, 5), []byte("abc"), hdr(0, 0), []byte("raw")}
	var msgs [][]byte
	for m := range got {
		msgs = append(msgs, m)
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d messages %q, want %d %q", len(msgs), msgs, len(want), want)
	}
	for i := range want {
		if !bytes.Equal(msgs[i], want[i]) {
			t.Errorf("message %d: %q, want %q", i, msgs[i], want[i])
		}
	}
}
