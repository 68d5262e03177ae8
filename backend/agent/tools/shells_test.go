package tools

import (
	"encoding/base64"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf16"
)

func TestWindowsShellChoice(t *testing.T) {
	lookIn := func(have ...string) func(string) (string, error) {
		return func(name string) (string, error) {
			for _, h := range have {
				if strings.EqualFold(h, name) {
					return `C:\bin\` + h, nil
				}
			}
			return "", exec.ErrNotFound
		}
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	comspec := map[string]string{"ComSpec": `C:\Windows\system32\cmd.exe`}
	tests := []struct {
		name       string
		configured string
		look       func(string) (string, error)
		env        map[string]string
		wantPath   string
		wantKind   shellKind
	}{
		{"pwsh first", "", lookIn("powershell.exe", "pwsh.exe"), comspec, `C:\bin\pwsh.exe`, powerShell},
		{"windows powershell", "", lookIn("powershell.exe"), comspec, `C:\bin\powershell.exe`, powerShell},
		{"no powershell: ComSpec", "", lookIn(), comspec, `C:\Windows\system32\cmd.exe`, cmdShell},
		{"no ComSpec: cmd on PATH", "", lookIn("cmd.exe"), nil, `C:\bin\cmd.exe`, cmdShell},
		{"nothing found", "", lookIn(), nil, "cmd.exe", cmdShell},
		{"configured cmd", `D:\tools\CMD.EXE`, lookIn("pwsh.exe"), comspec, `D:\tools\CMD.EXE`, cmdShell},
		{"configured powershell", `C:/ps/pwsh`, lookIn(), comspec, `C:/ps/pwsh`, powerShell},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, kind := windowsShell(tt.configured, tt.look, env(tt.env))
			if path != tt.wantPath || kind != tt.wantKind {
				t.Fatalf("windowsShell = %q, %v; want %q, %v", path, kind, tt.wantPath, tt.wantKind)
			}
		})
	}
}

func TestPowerShellArgs(t *testing.T) {
	script := `Write-Output "a 'b' \"c\" ü✓ $env:X"; exit 3`
	args := powerShellArgs(script)
	if len(args) < 2 || args[len(args)-2] != "-EncodedCommand" {
		t.Fatalf("args = %q, want -EncodedCommand last", args)
	}
	for _, want := range []string{"-NoProfile", "-NonInteractive"} {
		if !strings.Contains(strings.Join(args, " "), want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	raw, err := base64.StdEncoding.DecodeString(args[len(args)-1])
	if err != nil || len(raw)%2 != 0 {
		t.Fatalf("encoded command is not base64 of UTF-16: %v", err)
	}
	u := make([]uint16, len(raw)/2)
	for i := range u {
		u[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
	}
	got := string(utf16.Decode(u))
	if !strings.HasPrefix(got, powerShellPrelude) || strings.TrimPrefix(got, powerShellPrelude) != script {
		t.Fatalf("decoded command = %q, want the prelude and then %q", got, script)
	}
}

func TestCmdLine(t *testing.T) {
	got := cmdLine(`C:\Windows\system32\cmd.exe`, `echo "a b" & exit /b 2`)
	want := `"C:\Windows\system32\cmd.exe" /d /s /c "chcp 65001>nul 2>&1 & echo "a b" & exit /b 2"`
	if got != want {
		t.Fatalf("cmdLine =\n  %s\nwant\n  %s", got, want)
	}
	if shellKindOf(`C:\Windows\System32\cmd.exe`) != cmdShell || shellKindOf("cmd") != cmdShell || shellKindOf("powershell.exe") != powerShell {
		t.Fatal("shellKindOf misreads interpreter names")
	}
}
