package docker_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/engine/docker"
	"cubicle/backend/engine/enginetest"
	"cubicle/backend/fault"
)

// pingTimeout bounds one engine's answer to a ping: generous, since a daemon busy with other
// packages' containers on a loaded machine can take seconds, and a slow answer must not
// read as no engine (a failure under CUBICLE_REQUIRE_DOCKER, or a silently skipped suite).
const pingTimeout = 20 * time.Second

// dockerSocket finds a Docker daemon: CUBICLE_DOCKER_SOCKET (the one scripts/lib.sh
// ensure_docker_engine runs for the tests), else DOCKER_HOST or the default sockets.
func dockerSocket(ctx context.Context) (string, bool) {
	if s := os.Getenv("CUBICLE_DOCKER_SOCKET"); s != "" {
		kind, _, _, err := engine.Ping(ctx, s, pingTimeout)
		return s, err == nil && kind == engine.Docker
	}
	eps, _ := engine.Discover(ctx, engine.DiscoverOptions{Prefer: engine.Docker, Timeout: pingTimeout})
	for _, ep := range eps {
		if ep.Reachable && ep.Kind == engine.Docker {
			return ep.Socket, true
		}
	}
	return "", false
}

func connect(t *testing.T, socket string) *docker.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := docker.Connect(ctx, socket, docker.Options{})
	if err != nil {
		t.Fatalf("Connect(%s): %v", socket, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var _ enginetest.Engine = (*docker.Client)(nil)

// TestConformance runs the suite through the Docker adapter against every Docker Engine API
// present: a real Docker daemon when one answers, and Podman's Docker-compatible service
// (which CI always has), so the adapter is exercised on machines without Docker too.
// CUBICLE_REQUIRE_DOCKER=1 makes a missing Docker daemon a failure.
func TestConformance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*pingTimeout)
	defer cancel()
	ran := false
	if sock, ok := dockerSocket(ctx); ok {
		ran = true
		t.Run("docker", func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) enginetest.Engine { return connect(t, sock) })
		})
	} else if os.Getenv("CUBICLE_REQUIRE_DOCKER") == "1" {
		t.Error("no Docker daemon answers (CUBICLE_REQUIRE_DOCKER=1)")
	} else {
		t.Log("no Docker daemon answers; testing through Podman's Docker-compatible API only")
	}
	sock := os.Getenv("CUBICLE_PODMAN_SOCKET")
	if sock == "" {
		sock = "unix:///run/podman/podman.sock"
	}
	if _, _, _, err := engine.Ping(ctx, sock, pingTimeout); err == nil {
		ran = true
		t.Run("podman-compat", func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) enginetest.Engine { return connect(t, sock) })
		})
	}
	if !ran {
		enginetest.Require(t, "no Docker daemon and no Podman service answer")
	}
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
		{"unknown scheme", "ftp://127.0.0.1:1", fault.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := docker.Connect(ctx, tt.uri, docker.Options{}); !errors.Is(err, tt.want) {
				t.Fatalf("Connect(%s) = %v, want %v", tt.uri, err, tt.want)
			}
		})
	}
}
