//go:build !windows

package cli

// attachConsole does nothing: outside Windows a program always has its terminal's output.
func attachConsole() {}
