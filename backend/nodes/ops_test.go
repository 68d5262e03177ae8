package nodes_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/runner"
	"cubicle/runner/wire"
)

// TestEveryOpIsSent: every operation of the link's table is sent by a method of the server's
// side (Remote's, or the Hub's), named in the table; only the link's own ops have none.
func TestEveryOpIsSent(t *testing.T) {
	linkOwn := map[string]bool{wire.OpPing: true, wire.OpWatch: true}
	remote, hub := reflect.TypeOf(&nodes.Remote{}), reflect.TypeOf(&nodes.Hub{})
	seen := map[string]bool{}
	for _, op := range wire.Ops {
		if seen[op.Name] {
			t.Errorf("op %q is in wire.Ops twice", op.Name)
		}
		seen[op.Name] = true
		if op.Method == "" {
			if !linkOwn[op.Name] {
				t.Errorf("op %q names no method of nodes.Remote or nodes.Hub that sends it", op.Name)
			}
			continue
		}
		_, onRemote := remote.MethodByName(op.Method)
		_, onHub := hub.MethodByName(op.Method)
		if !onRemote && !onHub {
			t.Errorf("op %q: neither nodes.Remote nor nodes.Hub has its method %s", op.Name, op.Method)
		}
	}
	if len(wire.Ops) < 25 {
		t.Fatalf("wire.Ops has %d ops", len(wire.Ops))
	}
}

// TestRefusedBeforeSent: a runner that did not advertise an op's capability is refused by the
// server from the table (the op's class, naming the runner, its version and the capability)
// and the request never reaches the link. A host command that would leave a file leaves none.
func TestRefusedBeforeSent(t *testing.T) {
	x := newHub(t)
	old, err := x.h.Create("old box", false, x.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, op := range wire.Ops {
		if op.Cap != "" {
			caps = append(caps, op.Cap)
		}
	}
	startRunnerWith(t, runner.Config{Server: x.srv.URL, Token: old.Token, DataDir: t.TempDir(), Engine: "none",
		Version: "9.8.0", MaxBackoff: 200 * time.Millisecond, DropCapabilities: caps})
	waitFor(t, "the runner to connect", func() bool { return x.h.Connected(old.ID) })
	r, err := x.h.Node(old.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// An op without a capability reaches the runner (the count can move).
	if _, err := r.Status(ctx); err != nil {
		t.Fatalf("status: %v", err)
	}
	if n := nodes.Sent(x.h, old.ID, wire.OpStatus); n < 1 {
		t.Fatalf("status sent %d times", n)
	}

	refused := 0
	for _, op := range wire.Ops {
		if op.Cap == "" {
			continue
		}
		refused++
		err := nodes.Open(ctx, r, op)
		class := op.Refusal
		if class == nil {
			class = fault.ErrUnavailable
		}
		if !errors.Is(err, class) || !strings.Contains(err.Error(), "old box") || !strings.Contains(err.Error(), "9.8.0") ||
			!strings.Contains(err.Error(), op.Cap) {
			t.Errorf("%s to a runner without %s: %v (want %v naming the runner, its version and the capability)", op.Name, op.Cap, err, class)
		}
		if n := nodes.Sent(x.h, old.ID, op.Name); n != 0 {
			t.Errorf("%s was sent %d times to a runner without %s", op.Name, n, op.Cap)
		}
	}
	if refused < 5 {
		t.Fatalf("only %d ops need a capability", refused)
	}

	// The typed methods take the same path.
	if _, err := r.Stats(ctx); !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), wire.CapStats) {
		t.Errorf("stats: %v", err)
	}
	if _, err := r.SetIdlePolicy(ctx, "req-1", 3, nil); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), wire.CapIdlePolicy) {
		t.Errorf("idle policy: %v", err)
	}
	five := 5
	if _, err := r.SetIdlePolicy(ctx, "req-2", 30, &five); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), wire.CapPause) {
		t.Errorf("idle policy with a pause: %v", err)
	}
	mark := filepath.Join(t.TempDir(), "ran")
	if _, err := r.HostShell(ctx, wire.HostShellArgs{Command: "touch " + mark, TimeoutMS: 5000}); !errors.Is(err, fault.ErrConflict) ||
		!strings.Contains(err.Error(), "--no-host-tools") {
		t.Errorf("host shell: %v", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the refused host command ran")
	}
	for _, op := range []string{wire.OpStats, wire.OpSetIdlePolicy, wire.OpHostShell, wire.OpPause} {
		if n := nodes.Sent(x.h, old.ID, op); n != 0 {
			t.Errorf("%s was sent %d times", op, n)
		}
	}
}
