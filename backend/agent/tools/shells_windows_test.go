package tools

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"cubicle/internal/testenv"
)

// TestLocalHostDefaultShell runs host_shell with the interpreter Windows picks (PowerShell
// where there is one). Wine ships a powershell.exe that runs nothing; the test says so and
// skips there rather than pass on an empty answer.
func TestLocalHostDefaultShell(t *testing.T) {
	path, kind := windowsShell("", exec.LookPath, os.Getenv)
	dir := testenv.TempDir(t)
	script := "Write-Output ('a'+'b'); exit 4"
	if kind == cmdShell {
		script = "echo ab& exit /b 4"
	}
	res, err := LocalHost{}.Shell(context.Background(), script, dir, time.Minute, 1<<10)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if kind == powerShell && res.ExitCode == 0 && len(res.Stdout) == 0 {
		t.Skipf("%s ran nothing (Wine's stand-in PowerShell); the cmd.exe path is tested by TestLocalHostShell", path)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "ab" || res.ExitCode != 4 {
		t.Fatalf("%s: stdout %q (stderr %q), exit %d; want ab and 4", path, res.Stdout, res.Stderr, res.ExitCode)
	}
}
