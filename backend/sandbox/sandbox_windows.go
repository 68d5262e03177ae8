//go:build windows

package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cubicle/backend/fault"
)

func init() {
	if raw, ok := os.LookupEnv(envAppContainer); ok {
		os.Exit(appContainerMain(raw))
	}
	if os.Getenv(envFile) != "" {
		fileHelper(os.Getenv(envFile))
	}
}

// detect picks the AppContainer where this Windows offers it (Windows 8 and later), else
// none with why.
func detect(mode Kind, _ string) (Kind, string, error) {
	switch mode {
	case None:
		return None, "the host sandbox is turned off (" + EnvMode + "=none)", nil
	case Bwrap, Landlock, Seatbelt:
		return "", "", fault.Invalid("%s=%s is not Windows'; on Windows use appcontainer or auto", EnvMode, mode)
	}
	if err := appContainerAvailable(); err != nil {
		if mode == AppContainer {
			return "", "", fault.Invalid("%s=appcontainer: %v", EnvMode, err)
		}
		return None, err.Error(), nil
	}
	return AppContainer, "", nil
}

// wrap runs argv through this program as the AppContainer helper (appContainerMain): the plan
// travels in its environment, the command line is argv's (or the raw one the caller moved to
// envCmdLine). Each set of read-write paths has its own container and scratch directory.
func (s *Sandbox) wrap(_ context.Context, p Policy, argv []string) (Command, error) {
	if s.kind != AppContainer {
		return Command{}, fault.Unavailable("sandbox kind %q cannot run commands here", s.kind)
	}
	p = p.Clean()
	name := AppContainerName(p)
	scratch := filepath.Join(os.TempDir(), "cubicle-sandbox", strings.TrimPrefix(name, "Cubicle.HostTools."))
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return Command{}, fault.Unavailable("sandbox: %v", err)
	}
	p.ReadWrite = append(p.ReadWrite, scratch)
	rules := WindowsPolicy(p.Clean())
	// The file helper is this program: the container may read and run it (and nothing else
	// of its directory).
	rules = append(rules, WindowsRule{Path: s.exe})
	raw, err := json.Marshal(acPlan{Name: name, Rules: rules, Capabilities: AppContainerCapabilities(p.Network), Scratch: scratch})
	if err != nil {
		return Command{}, fmt.Errorf("sandbox: %w", err)
	}
	return Command{Argv: append([]string{s.exe}, argv...), Env: []string{envAppContainer + "=" + string(raw)}, Cleanup: func() {}, Sandboxed: true}, nil
}
