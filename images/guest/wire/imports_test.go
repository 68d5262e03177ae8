package wire

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeaf keeps this package a leaf (the standard library only) and the driver free of the
// host side: nothing cubicle/images/guest/... builds into the driver depends on cubicle/backend.
// (The driver's tests may use the host's typed client to drive the real driver.)
func TestLeaf(t *testing.T) {
	deps := goList(t, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	if got := strings.Fields(deps); len(got) != 1 || got[0] != "cubicle/images/guest/wire" {
		t.Errorf("wire depends on more than the standard library: %v", got)
	}
	deps = goList(t, "list", "-deps", "-f", "{{.ImportPath}}", "cubicle/images/guest/...")
	if !strings.Contains(deps, "cubicle/images/guest/wire") {
		t.Fatalf("go list -deps cubicle/images/guest/... misses the wire package:\n%s", deps)
	}
	for _, dep := range strings.Fields(deps) {
		if strings.HasPrefix(dep, "cubicle/backend") {
			t.Errorf("the driver depends on %s; it may import only cubicle/images/guest/... of Cubicle", dep)
		}
	}
}

func goList(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}
