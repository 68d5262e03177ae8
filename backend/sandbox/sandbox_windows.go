//go:build windows

package sandbox

import (
	"context"
	"os"

	"cubicle/backend/fault"
)

func init() {
	if os.Getenv(envFile) != "" {
		fileHelper(os.Getenv(envFile))
	}
}

// detect: Windows has no host sandbox yet. WindowsPolicy compiles the rules a restricted
// token would need, but no enforcement is wired, so a Windows node says so and runs host
// commands only where an administrator allowed "no sandbox".
func detect(mode Kind, _ string) (Kind, string, error) {
	switch mode {
	case Auto, None:
		return None, "Cubicle has no OS sandbox for host commands on Windows yet", nil
	}
	return "", "", fault.Invalid("%s=%s: Windows has no host sandbox yet; use none (with the node's \"no sandbox\" allowed) or auto", EnvMode, mode)
}

func (s *Sandbox) wrap(context.Context, Policy, []string) (Command, error) {
	return Command{}, fault.Unavailable("Cubicle has no OS sandbox for host commands on Windows yet")
}
