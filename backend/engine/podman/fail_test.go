package podman

import (
	"errors"
	"testing"

	"github.com/containers/podman/v5/pkg/errorhandling"

	"cubicle/backend/fault"
)

// A container removed between a list and an inspect: Podman answers 500 "does not exist in
// database: no such container"; callers (housekeeping, the desktops' reconcile) skip an absent
// container, so it must read as fault.ErrNotFound, while other 500s stay unavailable.
func TestFailVanishedContainerIsNotFound(t *testing.T) {
	gone := &errorhandling.ErrorModel{ResponseCode: 500, Because: "no such container",
		Message: `container 41f8d015 does not exist in database: no such container`}
	if err := fail("inspect container", gone); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("fail(vanished) = %v (class %v), want ErrNotFound", err, fault.Class(err))
	}
	other := &errorhandling.ErrorModel{ResponseCode: 500, Because: "database is locked", Message: "database is locked"}
	if err := fail("inspect container", other); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("fail(500) = %v (class %v), want ErrUnavailable", err, fault.Class(err))
	}
}
