package enginetest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// testExecAttach drives an attached exec session the way the guest link does: a long-lived
// process whose stdin and stdout carry a binary protocol, stderr kept apart, stdin
// half-closed, and a closed session that leaves no process behind.
func (s *suite) testExecAttach(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c, err := s.e.CreateContainer(ctx, engine.ContainerSpec{
		Name:        s.name("exec"),
		Image:       s.image,
		Labels:      s.labels,
		Command:     []string{"/bin/sleep", "3600"},
		NetworkMode: "none",
		StopTimeout: time.Second,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	t.Cleanup(func() { s.e.RemoveContainer(testContext(t, time.Minute), c.ID, true) })

	if _, err := s.e.ExecAttach(ctx, c.ID, engine.ExecSpec{Command: []string{"/bin/cat"}}); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("ExecAttach(created, not running) = %v, want ErrConflict", err)
	}
	if _, err := s.e.ExecAttach(ctx, s.name("missing"), engine.ExecSpec{Command: []string{"/bin/cat"}}); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("ExecAttach(missing) = %v, want ErrNotFound", err)
	}
	if err := s.e.StartContainer(ctx, c.ID); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}

	t.Run("binary echo", func(t *testing.T) {
		st, err := s.e.ExecAttach(ctx, c.ID, engine.ExecSpec{Command: []string{"/bin/cat"}})
		if err != nil {
			t.Fatalf("ExecAttach: %v", err)
		}
		defer st.Close()
		// Request/response turns (the link's pattern), then one large blob written while it is
		// read back (neither side may wait for the other to finish).
		for i := range 50 {
			msg := []byte{byte(i), 0, 1, 2, 0xff, '\n', '\r', 0x1b}
			if _, err := st.Write(msg); err != nil {
				t.Fatalf("write #%d: %v", i, err)
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(st, got); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo #%d = %x, %v; want %x", i, got, err, msg)
			}
		}
		big := make([]byte, 4<<20)
		rand.Read(big)
		werr := make(chan error, 1)
		go func() {
			_, err := st.Write(big)
			if err == nil {
				err = st.CloseWrite()
			}
			werr <- err
		}()
		got, err := io.ReadAll(st)
		if err != nil {
			t.Fatalf("read the echo: %v", err)
		}
		if err := <-werr; err != nil {
			t.Fatalf("write and half-close: %v", err)
		}
		if !bytes.Equal(got, big) {
			t.Fatalf("echo of %d random bytes came back as %d bytes (equal: false)", len(big), len(got))
		}
	})

	t.Run("stderr apart, env, user, workdir", func(t *testing.T) {
		user, uid := "65534", "65534"
		if s.cluster != nil { // exec runs as the container's user there
			user, uid = "", strconv.Itoa(s.cluster.UID)
		}
		st, err := s.e.ExecAttach(ctx, c.ID, engine.ExecSpec{
			Command: []string{"/bin/sh", "-c", `echo "out $CUBICLE_EXEC"; echo oops >&2; id -u; pwd; cat`},
			Env:     map[string]string{"CUBICLE_EXEC": "yes"},
			User:    user,
			WorkDir: "/tmp",
		})
		if err != nil {
			t.Fatalf("ExecAttach: %v", err)
		}
		defer st.Close()
		st.Write([]byte("tail\n"))
		st.CloseWrite()
		out, err := io.ReadAll(st)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if string(out) != "out yes\n"+uid+"\n/tmp\ntail\n" {
			t.Errorf("stdout = %q, want the two lines and the echoed tail (stderr kept apart)", out)
		}
		if !strings.Contains(st.Stderr(), "oops") {
			t.Errorf("Stderr() = %q, want oops", st.Stderr())
		}
	})

	t.Run("close ends the process", func(t *testing.T) {
		// The marker in argv finds the session's process; Close must end it (a link that
		// is closed must not leave its relay running in the desktop).
		marker := "cubicle-exec-" + s.run
		st, err := s.e.ExecAttach(ctx, c.ID, engine.ExecSpec{Command: []string{"/bin/sh", "-c", "cat; : " + marker}})
		if err != nil {
			t.Fatalf("ExecAttach: %v", err)
		}
		st.Write([]byte("x"))
		if _, err := io.ReadFull(st, make([]byte, 1)); err != nil {
			t.Fatalf("echo: %v", err)
		}
		if n := s.countProcs(t, c.ID, marker); n != 1 {
			t.Fatalf("%d processes carry the marker while the session runs, want 1", n)
		}
		st.Close()
		deadline := time.Now().Add(20 * time.Second)
		for s.countProcs(t, c.ID, marker) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the exec's process still runs 20 s after its stream was closed")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("process end is EOF", func(t *testing.T) {
		st, err := s.e.ExecAttach(ctx, c.ID, engine.ExecSpec{Command: []string{"/bin/sh", "-c", "echo bye; exit 3"}})
		if err != nil {
			t.Fatalf("ExecAttach: %v", err)
		}
		defer st.Close()
		out, err := io.ReadAll(st)
		if err != nil || string(out) != "bye\n" {
			t.Fatalf("ReadAll = %q, %v; want bye and EOF", out, err)
		}
	})

	t.Run("container stop ends the stream", func(t *testing.T) {
		st, err := s.e.ExecAttach(ctx, c.ID, engine.ExecSpec{Command: []string{"/bin/cat"}})
		if err != nil {
			t.Fatalf("ExecAttach: %v", err)
		}
		defer st.Close()
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(st); done <- err }()
		if err := s.e.StopContainer(ctx, c.ID, time.Second); err != nil {
			t.Fatalf("StopContainer: %v", err)
		}
		select {
		case <-done: // EOF or an error: either way the reader is not left hanging
		case <-time.After(30 * time.Second):
			t.Fatal("the stream's reader still blocks 30 s after the container stopped")
		}
	})
}

// countProcs counts the container's processes whose command line contains marker.
func (s *suite) countProcs(t *testing.T, id, marker string) int {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	st, err := s.e.ExecAttach(ctx, id, engine.ExecSpec{Command: []string{"/bin/ps", "-o", "args"}})
	if err != nil {
		t.Fatalf("ExecAttach(ps): %v", err)
	}
	defer st.Close()
	st.CloseWrite()
	out, err := io.ReadAll(st)
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, marker) && !strings.Contains(l, "ps -o") {
			n++
		}
	}
	return n
}
