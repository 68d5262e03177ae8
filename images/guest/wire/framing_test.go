package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

func TestFraming(t *testing.T) {
	var buf bytes.Buffer
	blob := []byte{0, 1, 2, 255}
	if err := WriteMessage(&buf, &Envelope{ID: 7, Op: OpExec, Args: json.RawMessage(`{"shell":"x"}`)}, blob); err != nil {
		t.Fatal(err)
	}
	var env Envelope
	got, err := ReadMessage(bufio.NewReader(&buf), &env)
	if err != nil || env.ID != 7 || env.Op != OpExec || !bytes.Equal(got, blob) {
		t.Fatalf("round trip: %+v %v %v", env, got, err)
	}
	tooBig := []byte{0x7f, 0, 0, 0, 0, 0, 0, 0}
	if _, err := ReadMessage(bufio.NewReader(bytes.NewReader(tooBig)), &env); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized header: %v", err)
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{NotFound("x"), CodeNotFound},
		{Exists("x"), CodeExists},
		{Conflict("x"), CodeConflict},
		{Invalid("x %d", 1), CodeInvalid},
		{Forbidden("x"), CodeForbidden},
		{Unavailable("x"), CodeUnavailable},
		{fmt.Errorf("wrapped: %w", Unavailable("x")), CodeUnavailable},
		{errors.New("plain"), CodeInternal},
		{nil, CodeInternal},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
	if msg := Invalid("x %d", 1).Error(); msg != "x 1" {
		t.Errorf("message %q", msg)
	}
}
