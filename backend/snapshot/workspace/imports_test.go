package workspace

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsStayBelowTheRoot keeps the import plan's arrows pointing down: the snapshots
// depend on the services they use (snapshot, vm, fleet, store), never on what wires or serves
// them — the HTTP adapter included, whose interface they implement (its RestoreResult is the
// snapshot package's).
func TestImportsStayBelowTheRoot(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || deps[len(deps)-1] != "cubicle/backend/snapshot/workspace" {
		t.Fatalf("go list -deps does not end with the package itself:\n%s", out)
	}
	above := []string{"cubicle/backend", "cubicle/backend/api", "cubicle/backend/cli", "cubicle/backend/mcpserver",
		"cubicle/backend/setup", "cubicle/app", "cubicle/runner", "github.com/wailsapp/"}
	for _, d := range deps {
		for _, a := range above {
			if d == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(d, a)) {
				t.Errorf("backend/snapshot/workspace depends on %s, which is above it in the import plan", d)
			}
		}
	}
}
