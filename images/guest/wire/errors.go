package wire

import (
	"errors"
	"fmt"
)

// Error codes on the wire. The host maps each to one of its error classes (CodeInternal to
// none); the driver produces them with the constructors below.
const (
	CodeNotFound    = "not_found"
	CodeExists      = "exists"
	CodeConflict    = "conflict"
	CodeInvalid     = "invalid"
	CodeForbidden   = "forbidden"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
)

// WireError is an error on the wire: a code and a message meant for people. It is also the
// error type the driver's operations return, so the code travels with the message.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error implements error: the message alone.
func (e *WireError) Error() string { return e.Message }

// Errorf returns a *WireError with code and the formatted message.
func Errorf(code, format string, args ...any) error {
	return &WireError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// NotFound returns a CodeNotFound error: the thing asked for does not exist.
func NotFound(format string, args ...any) error { return Errorf(CodeNotFound, format, args...) }

// Exists returns a CodeExists error: the thing to create exists already.
func Exists(format string, args ...any) error { return Errorf(CodeExists, format, args...) }

// Conflict returns a CodeConflict error: the wrong state for the operation.
func Conflict(format string, args ...any) error { return Errorf(CodeConflict, format, args...) }

// Invalid returns a CodeInvalid error: malformed or out-of-range input.
func Invalid(format string, args ...any) error { return Errorf(CodeInvalid, format, args...) }

// Forbidden returns a CodeForbidden error: the operation is not allowed.
func Forbidden(format string, args ...any) error { return Errorf(CodeForbidden, format, args...) }

// Unavailable returns a CodeUnavailable error: something needed is down now; retrying later may work.
func Unavailable(format string, args ...any) error { return Errorf(CodeUnavailable, format, args...) }

// CodeOf returns the code of the *WireError err wraps, or CodeInternal when it wraps none.
func CodeOf(err error) string {
	var we *WireError
	if errors.As(err, &we) && we.Code != "" {
		return we.Code
	}
	return CodeInternal
}
