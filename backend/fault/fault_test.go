package fault

import (
	"errors"
	"fmt"
	"testing"
)

func TestClass(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"plain", errors.New("x"), nil},
		{"new", Conflict("desktop is busy"), ErrConflict},
		{"wrapped", fmt.Errorf("vm a: start: %w", NotFound("no such image")), ErrNotFound},
		{"sentinel wrapped", fmt.Errorf("op: %w", ErrUnavailable), ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Class(tt.err); got != tt.want {
				t.Fatalf("Class(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	if got := Invalid("bad %d", 3).Error(); got != "bad 3" {
		t.Fatalf("message = %q", got)
	}
}

func TestCode(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{errors.New("x"), "internal"},
		{fmt.Errorf("op: %w", NotFound("gone")), "not_found"},
		{Exists("twice"), "exists"},
		{Conflict("busy"), "conflict"},
		{Invalid("bad"), "invalid"},
		{Forbidden("no"), "forbidden"},
		{ErrUnauthenticated, "unauthenticated"},
		{Unavailable("down"), "unavailable"},
		{ErrTooMany, "rate_limited"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := Code(tt.err); got != tt.want {
				t.Fatalf("Code(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
