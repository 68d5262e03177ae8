// Package guest is the host side of the bridge to Cubicle's in-guest driver (cubicle-guest,
// in images/guest): the typed Client the rest of Cubicle uses to drive a desktop —
// screenshots, a change-driven frame stream, settle waits, input, exec and files. The wire
// format itself (framing, message types, operation names, error codes, the protocol version)
// lives in the leaf package images/guest/wire, which the driver imports too; this package maps
// the wire's error codes to fault classes. docs/guest-protocol.md describes the protocol.
package guest

import (
	"fmt"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// ProtocolVersion is the bridge protocol this package speaks (wire.ProtocolVersion).
const ProtocolVersion = wire.ProtocolVersion

// Limits of the protocol that callers of the Client need.
const (
	// MaxFileSize caps one file read or write.
	MaxFileSize = wire.MaxFileSize
	// MaxExecOutput caps ExecRequest.MaxOutput (per stream).
	MaxExecOutput = wire.MaxExecOutput
)

// The Client's vocabulary: the wire's message types (see package wire for their fields).
type (
	Size              = wire.Size
	Hello             = wire.Hello
	Health            = wire.Health
	ScreenshotOptions = wire.ScreenshotOptions
	Frame             = wire.Frame
	SettleOptions     = wire.SettleOptions
	StreamOptions     = wire.StreamOptions
	Input             = wire.Input
	ExecRequest       = wire.ExecRequest
	ExecResult        = wire.ExecResult
	FileInfo          = wire.FileInfo
)

// classes maps the wire's error codes to fault classes (wire.CodeInternal has none).
var classes = map[string]error{
	wire.CodeNotFound: fault.ErrNotFound, wire.CodeExists: fault.ErrExists, wire.CodeConflict: fault.ErrConflict,
	wire.CodeInvalid: fault.ErrInvalid, wire.CodeForbidden: fault.ErrForbidden, wire.CodeUnavailable: fault.ErrUnavailable,
}

// ErrorFor converts a wire error into an error of the matching fault class.
func ErrorFor(op string, we *wire.WireError) error {
	class := classes[we.Code]
	if class == nil {
		return fmt.Errorf("desktop driver: %s: %s", op, we.Message)
	}
	return fault.New(class, "desktop driver: %s: %s", op, we.Message)
}
