package fleet

import (
	"os/exec"
	"strings"
	"testing"
)

// above are the packages above the fleet in the import plan (docs/architecture.md): the
// composition root that wires it, the HTTP adapter, the shells and the runner process. The
// fleet is what they call; were it to import one of them, a call would climb back up.
var above = []string{
	"cubicle/backend",
	"cubicle/backend/api",
	"cubicle/backend/cli",
	"cubicle/backend/mcpserver",
	"cubicle/backend/setup",
	"cubicle/app",
	"cubicle/runner",
	"github.com/wailsapp/",
	"github.com/containers/podman/",     // the engine's bindings are the root's to link (vms.go)
	"cubicle/backend/engine/kubernetes", // the cluster is reached through fleet.KubeEgress (vms.go)
	"k8s.io/",
}

// TestImportsStayBelowTheRoot keeps the import plan's arrows pointing down: the fleet depends
// on the services it routes to (vm, nodes, control, binding's types), never on what wires or
// serves it.
func TestImportsStayBelowTheRoot(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || deps[len(deps)-1] != "cubicle/backend/fleet" {
		t.Fatalf("go list -deps does not end with the fleet itself:\n%s", out)
	}
	for _, d := range deps {
		for _, a := range above {
			if d == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(d, a)) {
				t.Errorf("backend/fleet depends on %s, which is above it in the import plan", d)
			}
		}
	}
}
