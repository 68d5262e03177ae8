package wire

import (
	"os/exec"
	"strings"
	"testing"
)

// leaves are the product packages the link's contract may depend on: packages that import
// nothing of the product themselves (or only each other).
var leaves = map[string]bool{"cubicle/backend/fault": true, "cubicle/backend/nodeapi": true, "cubicle/runner/wire": true}

// TestImportsOnlyLeaves keeps the runner link's contract apart from the product's records
// and managers: were wire to import backend/store or backend/vm, a schema edit could change
// the protocol without anyone touching this package.
func TestImportsOnlyLeaves(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".", "../../backend/nodeapi").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !contains(deps, "cubicle/backend/nodeapi") {
		t.Fatalf("go list -deps misses cubicle/backend/nodeapi:\n%s", out)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "cubicle/") && !leaves[d] {
			t.Errorf("runner/wire (or backend/nodeapi) depends on %s; the link's contract imports only leaf packages", d)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
