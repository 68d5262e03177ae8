package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cubicle/backend/fault"
)

// StartConfirm is the engine contract's "at once": a container whose main process has failed
// within this long of its start is a failed start, never a started one. Every adapter's
// StartContainer looks at the container again this long after the start call returned, so
// that a desktop that dies as it starts is reported with its exit code and last output instead
// of as running (issue 32: a Pod seen Running by the kubelet a moment before its container
// ended).
const StartConfirm = 100 * time.Millisecond

// MaxStartConfirm bounds the window a slow start call widens StartConfirm to (ConfirmWindow).
const MaxStartConfirm = time.Second

// ConfirmWindow is how long after the start call returned a container's failure still counts
// as "at once": StartConfirm, or half the time the start call took when that is longer (at
// most MaxStartConfirm). A machine so loaded that the engine took long to start the container
// also gives its process little CPU, and CI saw `sh -c 'exit 7'` still running 100 ms after
// the start returned; on a quiet machine (a 120 ms start call) the window stays 100 ms.
func ConfirmWindow(startTook time.Duration) time.Duration {
	return min(max(StartConfirm, startTook/2), MaxStartConfirm)
}

// LogTail is how many lines of a container's last output a failed start quotes.
const LogTail = 20

// ConfirmStart checks that the container an adapter just started still runs: it inspects it
// at once and again ConfirmWindow(startTook) after the start call returned (startTook is how
// long that call took), and returns ExitedAtOnce when
// it has failed by then (ended with a code other than 0; a container whose command ran to
// completion at once, e.g. a one-off job, started fine). logs reads the container's last
// output (best effort; it may return ""). It is the shared tail of the adapters'
// StartContainer. The window is wall time: on a machine so loaded that a container's process
// gets no CPU for the whole window, its end is caught later — a desktop's start waits for its
// driver's handshake, which a dead container never gives.
//
// An inspect that fails for a passing cause is asked again (inspectTries): Podman 4 reads the
// cgroup of the container's process to inspect it, and a process that has just exited makes
// that read fail ("read /proc/N/cgroup: no such process") — the very case this check is for.
func ConfirmStart(ctx context.Context, op string, startTook time.Duration, inspect func(context.Context) (ContainerState, error), logs func(context.Context) string) error {
	began, window := time.Now(), ConfirmWindow(startTook)
	for {
		st, err := inspectRetrying(ctx, inspect)
		if err != nil {
			return err
		}
		if exited(st) && st.ExitCode != 0 {
			return ExitedAtOnce(op, st.ExitCode, st.Status, logs(ctx))
		}
		wait := window - time.Since(began)
		if wait <= 0 || !st.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // started; the caller's deadline is its own to report
		case <-time.After(wait):
		}
	}
}

// exited reports whether a container that was started has ended (not created, not running,
// not paused).
func exited(st ContainerState) bool {
	if st.Running || st.Paused {
		return false
	}
	switch st.Status {
	case "exited", "stopped", "dead":
		return true
	}
	return false
}

// ExitedAtOnce is the error of a start whose container ended at once: fault.ErrUnavailable
// naming the exit code and quoting the last output, so that a person sees why.
func ExitedAtOnce(op string, code int, reason, output string) error {
	msg := fmt.Sprintf("the desktop's container exited at once (exit code %d", code)
	if reason != "" && reason != "exited" {
		msg += ", " + reason
	}
	msg += ")"
	if s := strings.TrimSpace(output); s != "" {
		msg += "; its last output:\n" + s
	}
	return &Error{Op: op, Class: fault.ErrUnavailable, Err: errors.New(msg)}
}

// inspectTries is how often ConfirmStart asks an inspect that failed for a passing cause
// (fault.ErrUnavailable), inspectBackoff apart.
const (
	inspectTries   = 5
	inspectBackoff = 50 * time.Millisecond
)

// inspectRetrying calls inspect until it answers, fails for another cause than a passing one,
// or has failed inspectTries times.
func inspectRetrying(ctx context.Context, inspect func(context.Context) (ContainerState, error)) (ContainerState, error) {
	for try := 1; ; try++ {
		st, err := inspect(ctx)
		if err == nil || try == inspectTries || !errors.Is(err, fault.ErrUnavailable) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, err
		case <-time.After(inspectBackoff):
		}
	}
}
