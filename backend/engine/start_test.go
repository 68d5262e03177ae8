package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
)

// TestConfirmStartAsksAgain: an inspect that fails for a passing cause right after the start
// (Podman 4 reading the cgroup of a process that has just exited) is asked again, and the
// container that exited at once is reported with its code and output — not as the inspect's
// error; a refusal of another class is returned at once, and a passing one that persists
// after inspectTries too.
func TestConfirmStartAsksAgain(t *testing.T) {
	gone := &Error{Op: "inspect container", Class: fault.ErrUnavailable, Err: errors.New("read /proc/11757/cgroup: no such process")}
	calls := 0
	flaky := func(context.Context) (ContainerState, error) {
		calls++
		if calls <= 2 {
			return ContainerState{}, gone
		}
		return ContainerState{Status: "exited", ExitCode: 7}, nil
	}
	err := ConfirmStart(context.Background(), "start container", 0, flaky, func(context.Context) string { return "the last words" })
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "exit code 7") || !strings.Contains(err.Error(), "the last words") {
		t.Fatalf("after two failed inspects: %v; want the exit code and the output", err)
	}
	if calls != 3 {
		t.Fatalf("inspect called %d times, want 3", calls)
	}

	calls = 0
	missing := &Error{Op: "inspect container", Class: fault.ErrNotFound, Err: errors.New("no such container")}
	err = ConfirmStart(context.Background(), "start container", 0, func(context.Context) (ContainerState, error) {
		calls++
		return ContainerState{}, missing
	}, func(context.Context) string { return "" })
	if !errors.Is(err, fault.ErrNotFound) || calls != 1 {
		t.Fatalf("a missing container: %v after %d inspects; want not found after 1", err, calls)
	}

	calls = 0
	err = ConfirmStart(context.Background(), "start container", 0, func(context.Context) (ContainerState, error) {
		calls++
		return ContainerState{}, gone
	}, func(context.Context) string { return "" })
	if !errors.Is(err, gone) || calls != inspectTries {
		t.Fatalf("an inspect that keeps failing: %v after %d inspects; want its error after %d", err, calls, inspectTries)
	}
}

// TestConfirmWindowFollowsTheStartCall: a container that fails 300 ms after a start call
// that took a second (a loaded machine) is a failed start; after a quick start call (100 ms
// window) the same container counts as started; the window never exceeds MaxStartConfirm.
func TestConfirmWindowFollowsTheStartCall(t *testing.T) {
	if w := ConfirmWindow(120 * time.Millisecond); w != StartConfirm {
		t.Fatalf("window after a quick start call: %v, want %v", w, StartConfirm)
	}
	if w := ConfirmWindow(time.Minute); w != MaxStartConfirm {
		t.Fatalf("window after a minute's start call: %v, want %v", w, MaxStartConfirm)
	}
	for _, c := range []struct {
		took   time.Duration
		failed bool
	}{{time.Second, true}, {0, false}} {
		began := time.Now()
		inspect := func(context.Context) (ContainerState, error) {
			if time.Since(began) < 300*time.Millisecond {
				return ContainerState{Running: true, Status: "running"}, nil
			}
			return ContainerState{Status: "exited", ExitCode: 7}, nil
		}
		err := ConfirmStart(context.Background(), "start container", c.took, inspect, func(context.Context) string { return "" })
		if failed := errors.Is(err, fault.ErrUnavailable); failed != c.failed {
			t.Errorf("start call of %v, exit at 300 ms: %v; want failed=%v", c.took, err, c.failed)
		}
	}
}
