// Package fault defines Cubicle's error classes.
//
// Every error that crosses a package boundary is wrapped (fmt.Errorf("…: %w", err)) around
// exactly one of the class sentinels below, so callers decide with errors.Is and never by
// matching text. The api package maps a class to an HTTP status in one place; the CLI maps it
// to an exit code. Messages a person sees say what happened and what to do next.
package fault

import (
	"errors"
	"fmt"
)

// The error classes. Wrap them; never compare error strings.
var (
	// ErrNotFound: the thing asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: the thing to create exists already.
	ErrExists = errors.New("already exists")
	// ErrConflict: the thing is in the wrong state for the operation (busy, controlled, running…).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the caller's input is malformed or out of range.
	ErrInvalid = errors.New("invalid argument")
	// ErrForbidden: the caller may not do this.
	ErrForbidden = errors.New("forbidden")
	// ErrUnauthenticated: the caller is not logged in (or the session expired).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrUnavailable: a dependency (engine, driver, model, runner) cannot be reached now.
	ErrUnavailable = errors.New("unavailable")
	// ErrTooMany: the caller tried too often (failed logins); wait and try again.
	ErrTooMany = errors.New("too many attempts")
)

// classErr carries a class and a message meant for people.
type classErr struct {
	class error
	msg   string
}

func (e *classErr) Error() string { return e.msg }
func (e *classErr) Unwrap() error { return e.class }

// New returns an error of class whose message is the formatted text, without the class
// name appended. Use it for errors whose text is shown to people as it is.
func New(class error, format string, args ...any) error {
	return &classErr{class: class, msg: fmt.Sprintf(format, args...)}
}

// NotFound, Exists, Conflict, Invalid, Forbidden and Unavailable are shorthands for New.
func NotFound(format string, args ...any) error { return New(ErrNotFound, format, args...) }

// Exists returns an ErrExists error with the formatted message.
func Exists(format string, args ...any) error { return New(ErrExists, format, args...) }

// Conflict returns an ErrConflict error with the formatted message.
func Conflict(format string, args ...any) error { return New(ErrConflict, format, args...) }

// Invalid returns an ErrInvalid error with the formatted message.
func Invalid(format string, args ...any) error { return New(ErrInvalid, format, args...) }

// Forbidden returns an ErrForbidden error with the formatted message.
func Forbidden(format string, args ...any) error { return New(ErrForbidden, format, args...) }

// Unavailable returns an ErrUnavailable error with the formatted message.
func Unavailable(format string, args ...any) error { return New(ErrUnavailable, format, args...) }

// Class returns the class sentinel err wraps, or nil when it wraps none.
func Class(err error) error {
	for _, c := range []error{ErrNotFound, ErrExists, ErrConflict, ErrInvalid, ErrForbidden, ErrUnauthenticated, ErrUnavailable, ErrTooMany} {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// Code is err's class as the word clients see in an error's "code" (the HTTP API's error
// JSON, the computer channel's error messages): not_found, exists, conflict, invalid,
// forbidden, unauthenticated, unavailable, rate_limited, or internal for an error of no
// class.
func Code(err error) string {
	switch Class(err) {
	case ErrNotFound:
		return "not_found"
	case ErrExists:
		return "exists"
	case ErrConflict:
		return "conflict"
	case ErrInvalid:
		return "invalid"
	case ErrForbidden:
		return "forbidden"
	case ErrUnauthenticated:
		return "unauthenticated"
	case ErrUnavailable:
		return "unavailable"
	case ErrTooMany:
		return "rate_limited"
	}
	return "internal"
}
