//go:build !windows

package runner

import (
	"os"
	"syscall"
)

// replaceExecutable renames the verified new binary over the executable: one atomic rename, so
// the file is always either the old or the new version.
func replaceExecutable(newBin, exe string) error { return os.Rename(newBin, exe) }

// Reexec replaces this process with exe run with args (the same pid, environment and standard
// streams). It returns only on failure.
func Reexec(exe string, args []string) error {
	return syscall.Exec(exe, append([]string{exe}, args...), os.Environ())
}
