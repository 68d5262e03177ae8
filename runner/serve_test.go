package runner

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"cubicle/backend/fault"
	"cubicle/runner/wire"
)

// TestDispatchCoversOps: the runner's dispatch table has a handler for every op of the
// link's table and none for an op the table lacks.
func TestDispatchCoversOps(t *testing.T) {
	h := (&Runner{}).handlers()
	for _, op := range wire.Ops {
		if h[op.Name] == nil {
			t.Errorf("the runner has no handler for op %q (wire.Ops)", op.Name)
		}
	}
	for name := range h {
		found := false
		for _, op := range wire.Ops {
			found = found || op.Name == name
		}
		if !found {
			t.Errorf("the runner handles op %q, which wire.Ops lacks", name)
		}
	}
}

// TestUnknownOpAsksForAnUpdate: an op the runner does not know (a newer server's) is answered
// with an invalid-argument error telling to update the runner, and changes nothing.
func TestUnknownOpAsksForAnUpdate(t *testing.T) {
	r := &Runner{cfg: Config{Version: "1.2.3"}, log: testRunner(false).log}
	srv, cli := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.serve(context.Background(), srv)
	}()
	if err := wire.WriteFrame(cli, wire.Request{Op: "teleport"}); err != nil {
		t.Fatal(err)
	}
	var resp wire.Response
	if err := wire.ReadFrame(cli, &resp); err != nil {
		t.Fatal(err)
	}
	<-done
	err := resp.Error.Err()
	if !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), `"teleport"`) || !strings.Contains(err.Error(), "update it (cubicle runner 1.2.3)") {
		t.Fatalf("unknown op: %+v", resp)
	}
}

// TestBadArgumentsAreInvalid: arguments of the wrong shape are refused with the op's name
// before its handler runs (the runner has no desktops' manager here: a call would panic).
func TestBadArgumentsAreInvalid(t *testing.T) {
	r := &Runner{cfg: Config{Version: "1.2.3"}, log: testRunner(false).log}
	for _, op := range []string{wire.OpAgent, wire.OpStopInstance, wire.OpSetPolicy, wire.OpGuest} {
		srv, cli := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.serve(context.Background(), srv)
		}()
		if err := wire.WriteFrame(cli, wire.Request{Op: op, Args: []byte(`"not an object"`)}); err != nil {
			t.Fatal(err)
		}
		var resp wire.Response
		if err := wire.ReadFrame(cli, &resp); err != nil {
			t.Fatal(err)
		}
		cli.Close()
		<-done
		if err := resp.Error.Err(); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), op) {
			t.Errorf("%s with bad arguments: %+v", op, resp)
		}
	}
}
