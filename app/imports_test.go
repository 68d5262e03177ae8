package app

import (
	"os/exec"
	"strings"
	"testing"
)

const wailsModule = "github.com/wailsapp/"

// TestOnlyAppImportsWails keeps Wails inside this package: no other package of the module
// imports it (code or tests), under the default tags and under the desktop build's tags, and
// nothing under backend/ depends on it even indirectly.
func TestOnlyAppImportsWails(t *testing.T) {
	root := repoRoot(t)
	for _, tags := range []struct{ name, flag string }{
		{"default tags", ""},
		{"desktop tags", "-tags=" + desktopTags},
	} {
		t.Run(tags.name, func(t *testing.T) {
			args := []string{"list", "-e", "-f",
				`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`}
			if tags.flag != "" {
				args = append(args, tags.flag)
			}
			out := goList(t, root, append(args, "./...")...)
			pkgs := 0
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				fields := strings.Fields(line)
				if len(fields) == 0 {
					continue
				}
				pkgs++
				if fields[0] == "cubicle/app" {
					continue
				}
				for _, imp := range fields[1:] {
					if strings.HasPrefix(imp, wailsModule) {
						t.Errorf("%s imports %s; only cubicle/app may import Wails", fields[0], imp)
					}
				}
			}
			if pkgs < 3 {
				t.Fatalf("go list found only %d packages:\n%s", pkgs, out)
			}

			args = []string{"list", "-e", "-deps", "-f", "{{.ImportPath}}"}
			if tags.flag != "" {
				args = append(args, tags.flag)
			}
			deps := goList(t, root, append(args, "./backend/...")...)
			if !strings.Contains(deps, "cubicle/backend/fault") {
				t.Fatalf("go list -deps ./backend/... misses cubicle/backend/fault:\n%s", deps)
			}
			for _, dep := range strings.Fields(deps) {
				if strings.HasPrefix(dep, wailsModule) {
					t.Errorf("./backend/... depends on %s", dep)
				}
			}
		})
	}
}

func goList(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}
