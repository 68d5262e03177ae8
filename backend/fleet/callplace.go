package fleet

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/guard"
	"cubicle/backend/agent/tools"
	"cubicle/backend/vm"
)

// CallPlace is where a call acts, for the file guard: the agent's desktop working directory, or
// for host tools the host they run on — this machine (home is its user's home), or a runner's
// host, whose own home (asked over its link once per connection) and working directory count
// there. A runner that cannot say its home fails closed: paths under "~" are refused, never
// checked against this machine's home. It is security.Config.Place; its waits end when the fleet
// closes.
func (c *Computers) CallPlace(home string) func(t agent.TurnInfo, tool string) guard.Place {
	return func(t agent.TurnInfo, tool string) guard.Place {
		env, err := c.Environment(c.f.ctx, t)
		if !strings.HasPrefix(tool, "host_") {
			dir := tools.Workspace
			if err == nil {
				if d := vm.ResolveWorkDir(env.WorkDir); d != "" {
					dir = d
				}
			}
			return guard.Place{WorkDir: dir}
		}
		switch {
		case err != nil:
			return guard.Place{NoHome: "the host this call would run on is not known (" + err.Error() + ")"}
		case env.Host == nil:
			return guard.Place{WorkDir: tools.HostWorkDir(home, env.WorkDir)}
		}
		ctx, cancel := context.WithTimeout(c.f.ctx, 30*time.Second)
		defer cancel()
		where := c.f.Label(env.Plan.HostNode)
		var own []string // what the runner protects of its own (its data directory)
		if p, ok := env.Host.(ownProtected); ok {
			own, _ = p.Protected(ctx) // when this fails, Home fails too and says why
		}
		h, err := env.Host.Home(ctx)
		switch {
		case err != nil:
			return guard.Place{Remote: true, Protected: own, NoHome: fmt.Sprintf("the home directory on %s is not known (%v), so paths in it (~/…, $HOME, relative paths) cannot be checked: "+
				"run the runner as a user with a home directory (HOME set)", where, err)}
		case !filepath.IsAbs(h):
			return guard.Place{Remote: true, Protected: own, NoHome: fmt.Sprintf("the home directory on %s (%q) is not a path this server can check, so paths in it (~/…, $HOME, relative paths) are refused", where, h)}
		}
		return guard.Place{Remote: true, Home: h, Protected: own, WorkDir: tools.HostWorkDir(h, env.WorkDir)}
	}
}

// ownProtected is a host that names paths it protects of its own (a runner's data directory,
// remoteHost), for the guard's Place.
type ownProtected interface {
	Protected(ctx context.Context) ([]string, error)
}
