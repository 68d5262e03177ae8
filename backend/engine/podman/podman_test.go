package podman_test

import (
	"context"
	"errors"
	"fmt"
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

// TestListVolumesWhileVolumesComeAndGo lists volumes while others are created and removed:
// Podman fails a listing with "no such volume" when a volume it listed was removed before it
// inspected it (housekeeping failed so in CI while a test removed its desktop).
func TestListVolumesWhileVolumesComeAndGo(t *testing.T) {
	c := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // for a hung engine only
	defer cancel()
	labels := map[string]string{"cubicle.test": "churn-" + t.Name()}
	done := make(chan struct{})
	churned := 0
	// 200 volumes come and go, or as many as 5 s allow on a loaded machine (CI's took more
	// than 30 s for 200); idle, 200 take 1.5 s and the listing without its retry failed in them.
	churnEnd := time.Now().Add(5 * time.Second)
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil && i < 200 && time.Now().Before(churnEnd); i++ {
			name := fmt.Sprintf("cubicle-test-churn-%d-%d", os.Getpid(), i%4)
			if err := c.EnsureVolume(ctx, name, labels); err != nil {
				t.Errorf("EnsureVolume: %v", err)
				return
			}
			if err := c.RemoveVolume(ctx, name); err != nil {
				t.Errorf("RemoveVolume: %v", err)
				return
			}
			churned++
		}
	}()
	lists := 0
	for running := true; running; lists++ {
		select {
		case <-done:
			running = false
		default:
		}
		if _, err := c.ListVolumes(ctx, labels); err != nil {
			t.Fatalf("ListVolumes after %d listings: %v", lists, err)
		}
		if _, err := c.Volumes(ctx, labels); err != nil {
			t.Fatalf("Volumes after %d listings: %v", lists, err)
		}
	}
	<-done
	t.Logf("%d listings while %d volumes came and went", lists, churned)
}
