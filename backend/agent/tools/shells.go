package tools

import (
	"encoding/base64"
	"path/filepath"
	"strings"
	"unicode/utf16"
)

// The Windows command interpreters host_shell can use. The logic here is plain string work,
// kept free of build constraints so that it is tested on every OS; host_windows.go runs it.

// shellKind is how an interpreter takes a command.
type shellKind int

const (
	powerShell shellKind = iota // pwsh.exe, powershell.exe: -EncodedCommand
	cmdShell                    // cmd.exe: /d /s /c "…", as a raw command line
)

// windowsShell picks the interpreter for host_shell on Windows: the configured one (its kind
// read from its name), else PowerShell 7 (pwsh), else Windows PowerShell, else cmd.exe
// (%ComSpec%). look is exec.LookPath.
func windowsShell(configured string, look func(string) (string, error), getenv func(string) string) (string, shellKind) {
	if configured != "" {
		return configured, shellKindOf(configured)
	}
	for _, name := range []string{"pwsh.exe", "powershell.exe"} {
		if p, err := look(name); err == nil {
			return p, powerShell
		}
	}
	if c := getenv("ComSpec"); c != "" {
		return c, cmdShell
	}
	if p, err := look("cmd.exe"); err == nil {
		return p, cmdShell
	}
	return "cmd.exe", cmdShell
}

// shellKindOf reads an interpreter's kind from its file name (either slash: this runs on
// every OS in tests).
func shellKindOf(path string) shellKind {
	base := strings.ToLower(filepath.Base(strings.ReplaceAll(path, `\`, "/")))
	if strings.TrimSuffix(base, ".exe") == "cmd" {
		return cmdShell
	}
	return powerShell
}

// powerShellPrelude makes PowerShell write UTF-8 (Windows PowerShell writes the OEM code page
// to a pipe otherwise) and keeps progress bars out of the captured output.
const powerShellPrelude = "$ProgressPreference='SilentlyContinue';" +
	"[Console]::OutputEncoding=[System.Text.Encoding]::UTF8;" +
	"$OutputEncoding=[System.Text.Encoding]::UTF8;\n"

// powerShellArgs passes script as -EncodedCommand (base64 of UTF-16LE): no quoting rule of
// the Windows command line or of PowerShell's own parser can alter it on the way.
func powerShellArgs(script string) []string {
	u := utf16.Encode([]rune(powerShellPrelude + script))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		b[2*i], b[2*i+1] = byte(c), byte(c>>8)
	}
	return []string{"-NoLogo", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass",
		"-EncodedCommand", base64.StdEncoding.EncodeToString(b)}
}

// cmdLine is the raw command line for cmd.exe: /d skips AutoRun commands, /s with /c runs
// everything between the first and the last quote verbatim, so the script needs no escaping
// (cmd.exe does not follow the argv quoting rules Go's exec applies). chcp 65001 makes the
// built-in commands write UTF-8.
func cmdLine(interp, script string) string {
	return `"` + interp + `" /d /s /c "chcp 65001>nul 2>&1 & ` + script + `"`
}
