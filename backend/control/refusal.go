package control

import (
	"errors"

	"cubicle/backend/fault"
)

// Reason is a machine-readable word for why the Manager refused an input or an operation.
// The computer channel sends it to the client next to the human message, so the UI can react
// (for example offer "Take over again" after ReasonExpired) without parsing text.
type Reason string

// The reasons a Manager gives. Their error classes are noted; the messages are in refusal.
const (
	// ReasonHandedBack: the lease the input carried was handed back (fault.ErrConflict).
	ReasonHandedBack Reason = "handed_back"
	// ReasonExpired: the lease was not renewed in time (fault.ErrConflict).
	ReasonExpired Reason = "expired"
	// ReasonRevoked: the lease or task was ended by the system, e.g. the desktop was stopped
	// or recreated (fault.ErrConflict).
	ReasonRevoked Reason = "revoked"
	// ReasonTakenByOther: another person holds control now (fault.ErrConflict).
	ReasonTakenByOther Reason = "taken_by_other"
	// ReasonPersonControlling: a person holds control, so the operation is refused
	// (fault.ErrConflict).
	ReasonPersonControlling Reason = "person_controlling"
	// ReasonAgentRunning: an agent task operates the desktop (fault.ErrConflict).
	ReasonAgentRunning Reason = "agent_running"
	// ReasonWrongAccount: the input came from an account other than the holder's
	// (fault.ErrForbidden).
	ReasonWrongAccount Reason = "wrong_account"
	// ReasonWrongAgent: the input came through another agent's computer channel than the one
	// control was taken through (fault.ErrForbidden).
	ReasonWrongAgent Reason = "wrong_agent"
	// ReasonStaleVersion: the input's version is not the lease's, or its token belongs to a
	// lease the same person replaced by taking over again (fault.ErrConflict).
	ReasonStaleVersion Reason = "stale_version"
	// ReasonStaleFrame: the input was aimed at a frame from before the lease began
	// (fault.ErrConflict).
	ReasonStaleFrame Reason = "stale_frame"
	// ReasonNoFrame: the input named no frame (fault.ErrInvalid).
	ReasonNoFrame Reason = "no_frame"
	// ReasonNotHolder: the caller holds no lease on this desktop (fault.ErrForbidden).
	ReasonNotHolder Reason = "not_holder"
	// ReasonTaskEnded: the agent task is not (or no longer) the desktop's task
	// (fault.ErrConflict).
	ReasonTaskEnded Reason = "task_ended"
	// ReasonClosed: the Manager is shut down (fault.ErrUnavailable).
	ReasonClosed Reason = "closed"
)

// RefusedError is the error a Manager returns when it refuses. It unwraps to a fault class;
// its message is meant for people as it is.
type RefusedError struct {
	// Reason says why, for programs.
	Reason Reason
	class  error
	msg    string
}

// Error returns the message for people.
func (e *RefusedError) Error() string { return e.msg }

// Unwrap returns the fault class.
func (e *RefusedError) Unwrap() error { return e.class }

// ReasonOf returns the Reason of the RefusedError err wraps, or "" when it wraps none.
func ReasonOf(err error) Reason {
	var r *RefusedError
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

func refuse(class error, reason Reason, msg string) error {
	return &RefusedError{Reason: reason, class: class, msg: msg}
}

// Preallocated refusals for the input hot path: a refused input costs no allocation.
var (
	errNoFrame = refuse(fault.ErrInvalid, ReasonNoFrame,
		"input must name the screen frame it was aimed at")
	errNotHolder = refuse(fault.ErrForbidden, ReasonNotHolder,
		"you are not controlling this computer; take over first")
	errWrongAccount = refuse(fault.ErrForbidden, ReasonWrongAccount,
		"wrong account: this control lease belongs to another account")
	errWrongAgent = refuse(fault.ErrForbidden, ReasonWrongAgent,
		"wrong agent: control was taken through another agent's computer panel")
	errHandedBack = refuse(fault.ErrConflict, ReasonHandedBack,
		"control was handed back; take over again to continue")
	errExpired = refuse(fault.ErrConflict, ReasonExpired,
		"lease expired; take over again to continue")
	errRevoked = refuse(fault.ErrConflict, ReasonRevoked,
		"control was ended because the desktop was stopped or recreated; take over again to continue")
	errStaleVersion = refuse(fault.ErrConflict, ReasonStaleVersion,
		"stale version: control was taken again since; use the new lease")
	errStaleFrame = refuse(fault.ErrConflict, ReasonStaleFrame,
		"input was aimed at a screen frame from before you took control; look again and retry")
	errClosed = refuse(fault.ErrUnavailable, ReasonClosed,
		"control service is shut down")
	errTaskEnded = refuse(fault.ErrConflict, ReasonTaskEnded,
		"this agent task no longer operates this computer")
)
