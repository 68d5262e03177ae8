//go:build unix

package sandbox

import "syscall"

// errReadOnly is a write refused by a read-only mount (bubblewrap's read-only root).
var errReadOnly error = syscall.EROFS
