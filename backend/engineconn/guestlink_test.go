package engineconn

import (
	"context"
	"sync/atomic"
	"testing"

	"cubicle/backend/engine"
	"cubicle/backend/link"
)

// infoEngine is an engine whose only answer is Info (what it runs on); it counts the asks.
type infoEngine struct {
	EngineClient // nil: no other call may be made
	os           string
	asked        atomic.Int32
}

func (e *infoEngine) Info(context.Context) (engine.Info, error) {
	e.asked.Add(1)
	return engine.Info{OperatingSystem: e.os}, nil
}

// TestGuestLinkChoiceAsksOnlyWhenItMatters (issue 31 item 1): the guest-link choice was on the
// server's start, waiting seconds for Podman's info. It asks the engine only where the
// answer can change the choice (a Docker engine that may be Docker Desktop) and still finds
// Docker Desktop there.
func TestGuestLinkChoiceAsksOnlyWhenItMatters(t *testing.T) {
	tests := []struct {
		name  string
		mode  link.Mode
		ep    engine.Endpoint
		os    string
		asks  int32
		want  string
		mount bool
	}{
		{"podman, local socket", link.Auto, engine.Endpoint{Kind: engine.Podman, Socket: "unix:///run/podman/podman.sock"}, "Debian GNU/Linux 12 (bookworm)", 0, link.NameSocket, true},
		{"podman machine", link.Auto, engine.Endpoint{Kind: engine.Podman, Socket: "unix:///home/a/.local/share/containers/podman/machine/podman.sock", VM: true}, "fedora", 0, link.NameExec, false},
		{"forced exec", link.ExecMode, engine.Endpoint{Kind: engine.Docker, Socket: "unix:///var/run/docker.sock"}, "Docker Desktop", 0, link.NameExec, false},
		{"remote docker", link.Auto, engine.Endpoint{Kind: engine.Docker, Socket: "tcp://10.0.0.2:2375", Remote: true}, "Docker Desktop", 0, link.NameExec, false},
		{"docker engine", link.Auto, engine.Endpoint{Kind: engine.Docker, Socket: "unix:///var/run/docker.sock"}, "Ubuntu 24.04", 1, link.NameSocket, true},
		{"docker desktop behind the usual socket", link.Auto, engine.Endpoint{Kind: engine.Docker, Socket: "unix:///var/run/docker.sock"}, "Docker Desktop", 1, link.NameExec, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &infoEngine{os: tt.os}
			c := GuestLinkChoice(t.Context(), tt.mode, &ConnectedEngine{Client: e, Endpoint: tt.ep})
			if got := e.asked.Load(); got != tt.asks {
				t.Errorf("the engine was asked what it runs on %d times, want %d", got, tt.asks)
			}
			if c.Primary != tt.want || c.Mount != tt.mount {
				t.Errorf("choice %+v, want %s (mount %v)", c, tt.want, tt.mount)
			}
		})
	}
}
