package engine

import (
	"context"
	"errors"
	"net/http"

	"cubicle/backend/fault"
)

// Error is an engine failure translated at an adapter boundary. It unwraps to both its fault
// class (so errors.Is(err, fault.ErrNotFound) works) and the client's original error.
type Error struct {
	Op     string // what the adapter was doing, e.g. `inspect container "abc"`
	Class  error  // one of the fault sentinels
	Status int    // HTTP status the engine answered, 0 when no answer
	Err    error  // the client's error
}

func (e *Error) Error() string { return e.Op + ": " + e.Err.Error() }

// Unwrap returns the class and the original error.
func (e *Error) Unwrap() []error { return []error{e.Class, e.Err} }

// ClassForStatus maps an engine API HTTP status to a fault class. 304 (container already
// started or stopped) and 409 are conflicts; any other failure, 5xx included, means the
// engine could not do it now and is ErrUnavailable.
func ClassForStatus(status int) error {
	switch status {
	case http.StatusNotFound:
		return fault.ErrNotFound
	case http.StatusConflict, http.StatusNotModified:
		return fault.ErrConflict
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
		return fault.ErrInvalid
	case http.StatusUnauthorized, http.StatusForbidden:
		return fault.ErrForbidden
	default:
		return fault.ErrUnavailable
	}
}

// Wrap builds the translated error for op from the engine's HTTP status (0 when none) and the
// client's error, keeping a class the client error already carries (context cancellation is
// passed through unchanged so callers can test for it).
func Wrap(op string, status int, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Op: op, Class: fault.ErrUnavailable, Err: err}
	}
	if c := fault.Class(err); c != nil {
		return &Error{Op: op, Class: c, Status: status, Err: err}
	}
	if status == 0 {
		// No answer: the socket is missing, refused or timed out.
		return &Error{Op: op, Class: fault.ErrUnavailable, Err: err}
	}
	return &Error{Op: op, Class: ClassForStatus(status), Status: status, Err: err}
}
