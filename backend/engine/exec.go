package engine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ExecSpec describes a process started in a running container with its stdin and stdout
// attached (ExecAttach of the adapters). There is never a TTY: the byte streams stay exact.
type ExecSpec struct {
	Command []string
	User    string            // "" = the container's user
	Env     map[string]string // added to the container's environment
	WorkDir string            // "" = the container's working directory
}

// stderrKeep is how much of an exec's stderr an ExecStream keeps (the tail).
const stderrKeep = 4 << 10

// ExecStream is an attached, non-TTY exec session: Write feeds the process's stdin, Read
// returns its stdout. The engine multiplexes stdout and stderr on one connection (8-byte
// frame headers: stream, 3 zero bytes, big-endian length); ExecStream demultiplexes as it
// reads, without a goroutine, and keeps the tail of stderr for error messages (Stderr).
//
// Read must not be called concurrently with itself, nor Write with itself; a Read and a
// Write may run at the same time. Close may be called from any goroutine and unblocks both.
type ExecStream struct {
	conn net.Conn
	br   *bufio.Reader

	left int  // bytes left in the current frame; guarded by the reader
	kind byte // stream of the current frame: 1 stdout, 2 stderr

	mu     sync.Mutex // guards stderr
	stderr []byte
}

// NewExecStream wraps the hijacked connection of an exec session. br reads conn (it may
// hold bytes already read past the HTTP response); nil reads conn directly.
func NewExecStream(conn net.Conn, br *bufio.Reader) *ExecStream {
	if br == nil {
		br = bufio.NewReaderSize(conn, 64<<10)
	}
	return &ExecStream{conn: conn, br: br}
}

// Read returns the process's stdout. It returns io.EOF once the process ended and its output
// was read.
func (s *ExecStream) Read(p []byte) (int, error) {
	for s.left == 0 {
		var hdr [8]byte
		if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return 0, fmt.Errorf("exec stream: truncated frame header: %w", err)
			}
			return 0, err
		}
		s.kind, s.left = hdr[0], int(binary.BigEndian.Uint32(hdr[4:]))
		switch s.kind {
		case 0, 1:
			// stdin echo (never sent without a TTY) is treated as stdout, like the engines' own clients do.
		case 2:
			if err := s.drainStderr(); err != nil {
				return 0, err
			}
		case 3:
			// Podman reports an attach error as a frame on stream 3.
			msg := make([]byte, min(s.left, stderrKeep))
			io.ReadFull(s.br, msg)
			return 0, fmt.Errorf("exec stream: the engine reported: %s", msg)
		default:
			return 0, fmt.Errorf("exec stream: unknown stream %d in a frame header (is a TTY attached?)", s.kind)
		}
	}
	if len(p) > s.left {
		p = p[:s.left]
	}
	n, err := s.br.Read(p)
	s.left -= n
	if err == io.EOF && s.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// drainStderr reads the current stderr frame into the kept tail.
func (s *ExecStream) drainStderr() error {
	buf := make([]byte, min(s.left, 32<<10))
	for s.left > 0 {
		n, err := s.br.Read(buf[:min(s.left, len(buf))])
		s.left -= n
		s.mu.Lock()
		s.stderr = append(s.stderr, buf[:n]...)
		if len(s.stderr) > stderrKeep {
			s.stderr = append(s.stderr[:0], s.stderr[len(s.stderr)-stderrKeep:]...)
		}
		s.mu.Unlock()
		if err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// Write sends p to the process's stdin.
func (s *ExecStream) Write(p []byte) (int, error) { return s.conn.Write(p) }

// CloseWrite closes the process's stdin (a half-close of the connection); its output can
// still be read.
func (s *ExecStream) CloseWrite() error {
	if cw, ok := s.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("exec stream: the connection cannot be half-closed")
}

// Close ends the session's connection. The engine then ends the attach; the process sees
// its stdin close.
func (s *ExecStream) Close() error { return s.conn.Close() }

// LocalAddr, RemoteAddr and the deadlines are those of the session's connection: an
// ExecStream is a net.Conn whose bytes are the process's stdin and stdout.
func (s *ExecStream) LocalAddr() net.Addr                { return s.conn.LocalAddr() }
func (s *ExecStream) RemoteAddr() net.Addr               { return s.conn.RemoteAddr() }
func (s *ExecStream) SetDeadline(t time.Time) error      { return s.conn.SetDeadline(t) }
func (s *ExecStream) SetReadDeadline(t time.Time) error  { return s.conn.SetReadDeadline(t) }
func (s *ExecStream) SetWriteDeadline(t time.Time) error { return s.conn.SetWriteDeadline(t) }

var _ net.Conn = (*ExecStream)(nil)

// Stderr returns the tail (at most 4 KiB) of what the process wrote to stderr so far.
func (s *ExecStream) Stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.stderr)
}
