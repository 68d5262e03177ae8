package kubernetes

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// ExecAttach runs spec.Command in container id's running Pod through the exec subresource
// (client-go remotecommand over SPDY: API server → kubelet → runtime, no port of the Pod's
// own) with stdin and stdout attached and no TTY, and returns the session as an
// engine.ExecStream — the same type the other engines' ExecAttach return, so the guest link's
// exec transport runs over it unchanged. A container that does not run is fault.ErrConflict,
// a missing one fault.ErrNotFound. spec.User other than "" is fault.ErrInvalid (exec has no
// user); Env and WorkDir are applied by a /bin/sh wrapper.
//
// The session's process ends when the stream is closed; when the process ends or the API
// server goes away, reads end (with the reason as the stream's error when there is one).
func (c *Client) ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error) {
	op := fmt.Sprintf("exec in container %q", id)
	if len(spec.Command) == 0 {
		return nil, fault.Invalid("kubernetes: exec needs a command")
	}
	if spec.User != "" {
		return nil, fault.Invalid("kubernetes: exec cannot switch users (%q): processes run as the pod's user", spec.User)
	}
	cm, err := c.record(ctx, op, id)
	if err != nil {
		return nil, err
	}
	p, err := c.pod(ctx, op, id)
	if err != nil {
		return nil, err
	}
	if p == nil || !c.state(cm, p).Running {
		return nil, &engine.Error{Op: op, Class: fault.ErrConflict, Err: errors.New("the container is not running")}
	}
	req := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.ns).Name(id).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: execCommand(spec),
			Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(c.rest, "POST", req.URL())
	if err != nil {
		return nil, &engine.Error{Op: op, Class: fault.ErrInvalid, Err: err}
	}
	return startExec(c, op, ex), nil
}

// execCommand wraps spec.Command in a shell that sets its environment and directory, when
// it asks for either (the exec subresource has neither).
func execCommand(spec engine.ExecSpec) []string {
	if len(spec.Env) == 0 && spec.WorkDir == "" {
		return spec.Command
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		fmt.Fprintf(&b, "export %s=%s; ", k, shellQuote(spec.Env[k]))
	}
	if spec.WorkDir != "" {
		fmt.Fprintf(&b, "cd %s || exit 127; ", shellQuote(spec.WorkDir))
	}
	b.WriteString(`exec "$@"`)
	return append([]string{"/bin/sh", "-c", b.String(), "sh"}, spec.Command...)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// execConn is the net.Conn an engine.ExecStream reads and writes: writes go to the remote
// process's stdin through one pipe; its stdout and stderr come back through another,
// framed as the Docker and Podman APIs frame them (stream byte, 3 zero bytes, big-endian
// length), which ExecStream takes apart. Both pipes are net.Pipe, so deadlines work.
type execConn struct {
	rd net.Conn // reads: framed output
	wr net.Conn // writes: the process's stdin

	cancel context.CancelFunc
	done   chan struct{} // closed when the session's goroutine returned

	closeOnce sync.Once
}

// startExec runs ex in a goroutine owned by the returned stream's connection (Close cancels
// it and waits).
func startExec(c *Client, op string, ex remotecommand.Executor) *engine.ExecStream {
	outR, outW := net.Pipe() // framed stdout/stderr: session → reader
	inR, inW := net.Pipe()   // stdin: writer → session
	ctx, cancel := context.WithCancel(context.Background())
	conn := &execConn{rd: outR, wr: inW, cancel: cancel, done: make(chan struct{})}
	fw := &frameWriter{w: outW}
	go func() { // owned by conn: Close cancels ctx and waits for done
		defer close(conn.done)
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: fw.stream(1), Stderr: fw.stream(2)})
		var exit utilexec.ExitError
		if errors.As(err, &exit) {
			err = nil // the process ended with a code: its output ends, as with the other engines
		}
		if err != nil && ctx.Err() == nil {
			// The engine-error stream (3) of the framing carries why the session ended.
			fw.write(3, []byte(c.wrap(op, err).Error()))
		}
		outW.Close()
		inR.Close()
	}()
	return engine.NewExecStream(conn, nil)
}

func (e *execConn) Read(p []byte) (int, error)  { return e.rd.Read(p) }
func (e *execConn) Write(p []byte) (int, error) { return e.wr.Write(p) }

// CloseWrite ends the process's stdin; its output can still be read.
func (e *execConn) CloseWrite() error { return e.wr.Close() }

// Close ends the session (the remote process sees its stdin close and its streams reset)
// and waits for the session's goroutine.
func (e *execConn) Close() error {
	e.closeOnce.Do(func() {
		e.wr.Close()
		e.rd.Close()
		e.cancel()
	})
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		return errors.New("kubernetes: the exec session did not end within 10 s of its close")
	}
	return nil
}

func (e *execConn) LocalAddr() net.Addr  { return execAddr{} }
func (e *execConn) RemoteAddr() net.Addr { return execAddr{} }
func (e *execConn) SetDeadline(t time.Time) error {
	return errors.Join(e.rd.SetReadDeadline(t), e.wr.SetWriteDeadline(t))
}
func (e *execConn) SetReadDeadline(t time.Time) error  { return e.rd.SetReadDeadline(t) }
func (e *execConn) SetWriteDeadline(t time.Time) error { return e.wr.SetWriteDeadline(t) }

type execAddr struct{}

func (execAddr) Network() string { return "kubernetes-exec" }
func (execAddr) String() string  { return "kubernetes-exec" }

// frameWriter writes the session's output streams as frames into one pipe; the session
// writes stdout and stderr from different goroutines.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) write(kind byte, p []byte) error {
	buf := make([]byte, 8+len(p))
	buf[0] = kind
	binary.BigEndian.PutUint32(buf[4:], uint32(len(p)))
	copy(buf[8:], p)
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.w.Write(buf)
	return err
}

func (f *frameWriter) stream(kind byte) io.Writer { return streamWriter{f, kind} }

type streamWriter struct {
	f    *frameWriter
	kind byte
}

func (s streamWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += 1 << 20 { // frames of at most 1 MiB
		end := min(len(p), off+1<<20)
		if err := s.f.write(s.kind, p[off:end]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}
