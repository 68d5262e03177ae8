package podman

import (
	"context"
	"errors"
	"testing"
	"time"
)

// busyErr is how Podman 4.3 refuses to remove a container whose shm is still mounted.
var busyErr = errors.New(`removing container abc root filesystem: 1 error occurred:
	* unlinkat /var/lib/containers/storage/overlay-containers/abc/userdata/shm: device or resource busy`)

func TestWhileBusyTriesAgainUntilTheMountIsFree(t *testing.T) {
	calls := 0
	err := whileBusy(t.Context(), time.Minute, func() error {
		calls++
		if calls < 4 {
			return busyErr
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("busy three times, then free: %v after %d calls, want nil after 4", err, calls)
	}
}

func TestWhileBusyPassesOtherErrorsOnAtOnce(t *testing.T) {
	other := errors.New("no such container")
	calls := 0
	err := whileBusy(t.Context(), time.Minute, func() error { calls++; return other })
	if !errors.Is(err, other) || calls != 1 {
		t.Fatalf("another error: %v after %d calls, want it after 1", err, calls)
	}
	// A busy mount, then the container gone (the engine removed it meanwhile): that answer is
	// passed on (callers take not-found as removed).
	calls = 0
	err = whileBusy(t.Context(), time.Minute, func() error {
		calls++
		if calls == 1 {
			return busyErr
		}
		return other
	})
	if !errors.Is(err, other) || calls != 2 {
		t.Fatalf("busy, then gone: %v after %d calls", err, calls)
	}
}

func TestWhileBusyGivesUpAfterItsBudget(t *testing.T) {
	calls := 0
	err := whileBusy(t.Context(), 300*time.Millisecond, func() error { calls++; return busyErr })
	if !errors.Is(err, busyErr) || calls < 2 {
		t.Fatalf("always busy: %v after %d calls, want the busy error after at least 2", err, calls)
	}
}

func TestWhileBusyEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := whileBusy(ctx, time.Hour, func() error {
		calls++
		cancel()
		return busyErr
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("context ended while busy: %v after %d calls", err, calls)
	}
}
