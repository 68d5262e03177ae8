//go:build windows

package sandbox

import "errors"

// errReadOnly never matches on Windows (no read-only mounts).
var errReadOnly = errors.New("read-only file system")
