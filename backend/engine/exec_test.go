package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"
)

func frame(kind byte, payload string) []byte {
	hdr := make([]byte, 8)
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
	return append(hdr, payload...)
}

// streamOf returns an ExecStream reading raw (one byte per Read, the worst split) and a
// pipe end that receives what the stream writes.
func streamOf(t *testing.T, raw []byte) (*ExecStream, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	s := NewExecStream(a, nil)
	s.br.Reset(iotest.OneByteReader(bytes.NewReader(raw)))
	return s, b
}

func TestExecStreamDemux(t *testing.T) {
	var raw []byte
	raw = append(raw, frame(1, "hello ")...)
	raw = append(raw, frame(2, "warning: x\n")...)
	raw = append(raw, frame(1, "")...)
	raw = append(raw, frame(1, "world")...)
	raw = append(raw, frame(2, strings.Repeat("e", 5000))...)
	raw = append(raw, frame(1, "\x00\xff")...)
	s, _ := streamOf(t, raw)
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "hello world\x00\xff" {
		t.Fatalf("stdout = %q, %v", got, err)
	}
	if e := s.Stderr(); len(e) != stderrKeep || strings.Contains(e, "warning") || !strings.HasSuffix(e, "eee") {
		t.Errorf("stderr tail: %d bytes, warning dropped: %v", len(e), !strings.Contains(e, "warning"))
	}
}

func TestExecStreamErrors(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want string
	}{
		{"truncated header", frame(1, "ab")[:5], "truncated frame header"},
		{"truncated payload", frame(1, "abcdef")[:10], "unexpected EOF"},
		{"engine error", frame(3, "container exited"), "the engine reported: container exited"},
		{"tty output", []byte("plain text from a tty"), "unknown stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := streamOf(t, tt.raw)
			_, err := io.ReadAll(s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	s, _ := streamOf(t, nil)
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("empty stream: %v, want EOF", err)
	}
}

func TestExecStreamWrite(t *testing.T) {
	s, peer := streamOf(t, nil)
	go s.Write([]byte("to stdin"))
	buf := make([]byte, 8)
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "to stdin" {
		t.Fatalf("peer got %q, %v", buf, err)
	}
	if err := s.CloseWrite(); err == nil {
		t.Error("CloseWrite on a pipe (no half-close) succeeded")
	}
	s.Close()
	if _, err := s.Write([]byte("x")); err == nil {
		t.Error("Write after Close succeeded")
	}
}
