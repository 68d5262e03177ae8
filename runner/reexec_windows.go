//go:build windows

package runner

import (
	"errors"
	"os"
	"os/exec"
)

// replaceExecutable moves the running executable aside (Windows cannot replace a running
// program's file, but it can rename it) and renames the verified new binary into its place;
// it puts the old one back when that fails.
func replaceExecutable(newBin, exe string) error {
	old := exe + ".old"
	os.Remove(old)
	if err := os.Rename(exe, old); err != nil {
		return err
	}
	if err := os.Rename(newBin, exe); err != nil {
		return errors.Join(err, os.Rename(old, exe))
	}
	return nil
}

// Reexec starts exe with args as a new process with this one's standard streams; the caller
// then exits (Windows has no exec).
func Reexec(exe string, args []string) error {
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Start()
}
