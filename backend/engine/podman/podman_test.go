package podman_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/enginetest"
	"cubicle/backend/engine/podman"
	"cubicle/backend/fault"
)

// socket is the Podman service the tests use: CUBICLE_PODMAN_SOCKET or the rootful default.
func socket() string {
	if s := os.Getenv("CUBICLE_PODMAN_SOCKET"); s != "" {
		return s
	}
	return "unix:///run/podman/podman.sock"
}

func connect(t *testing.T) *podman.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, _, err := engine.Ping(ctx, socket(), 2*time.Second); err != nil {
		enginetest.Require(t, "no Podman service at "+socket()+": "+err.Error())
	}
	c, err := podman.Connect(ctx, socket(), podman.Options{})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var _ enginetest.Engine = (*podman.Client)(nil)

func TestConformance(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) enginetest.Engine { return connect(t) })
}

func TestConnectUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tests := []struct {
		name string
		uri  string
		want error
	}{
		{"missing socket", "unix://" + t.TempDir() + "/none.sock", fault.ErrUnavailable},
		{"nothing on tcp", "tcp://127.0.0.1:1", fault.ErrUnavailable},
		{"named pipe", "npipe:////./pipe/podman-machine-default", fault.ErrInvalid},
		{"unknown scheme", "http://127.0.0.1:1", fault.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := podman.Connect(ctx, tt.uri, podman.Options{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Connect(%s) = %v, want %v", tt.uri, err, tt.want)
			}
		})
	}
}
