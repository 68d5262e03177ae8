//go:build darwin

package sandbox

import (
	"context"
	"os"
	"os/exec"

	"cubicle/backend/fault"
)

func init() {
	if os.Getenv(envProbe) == "1" {
		os.Exit(0)
	}
	if op := os.Getenv(envFile); op != "" {
		fileHelper(op)
	}
}

func detect(mode Kind, _ string) (Kind, string, error) {
	switch mode {
	case None:
		return None, "the host sandbox is turned off (" + EnvMode + "=none)", nil
	case Bwrap, Landlock, AppContainer:
		return "", "", fault.Invalid("%s=%s is not macOS's; on macOS use sandbox-exec or auto", EnvMode, mode)
	}
	if _, err := exec.LookPath("/usr/bin/sandbox-exec"); err != nil {
		return None, "sandbox-exec (/usr/bin/sandbox-exec, part of macOS) is missing", nil
	}
	return Seatbelt, "", nil
}

// wrap runs argv under sandbox-exec with the policy's generated profile.
func (s *Sandbox) wrap(_ context.Context, p Policy, argv []string) (Command, error) {
	p.ReadWrite = append(p.ReadWrite, Scratch...)
	p = p.Clean()
	return Command{Argv: append([]string{"/usr/bin/sandbox-exec", "-p", SBPL(p)}, argv...), Cleanup: func() {}, Sandboxed: true}, nil
}
