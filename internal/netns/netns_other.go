//go:build !linux

package netns

import "cubicle/backend/fault"

// Available says why hosts cannot be made here: network namespaces are Linux's.
func Available() error {
	return fault.Unavailable("network namespaces need Linux")
}

// New fails: see Available.
func New(string) (*Host, error) { return nil, Available() }

// Close does nothing (no host can be made here).
func (h *Host) Close() error { return nil }

// SetLink fails: see Available.
func (h *Host) SetLink(bool) error { return Available() }

// Route fails: see Available.
func (h *Host) Route(string, string) error { return Available() }
