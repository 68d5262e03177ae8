package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf16"
)

// Windows' sandbox is an AppContainer (docs/sandbox.md): the command runs with a token of the
// container's own SID, which the file system grants nothing but what every app container may
// read (the system's programs and libraries) and what Cubicle grants it on the way in — the
// read-write paths of its policy — while the hidden paths carry an explicit denial for it. A
// container has no network unless given the capability, and never reaches this machine's
// loopback (Cubicle's own API included). This file is the part of it every OS compiles and
// tests; appcontainer_windows.go enforces it.

// AppContainer is the Windows kind.
const AppContainer Kind = "appcontainer"

// envAppContainer carries the AppContainer plan (JSON) to this program started again as the
// Windows helper.
const envAppContainer = "CUBICLE_SANDBOX_APPCONTAINER"

// EnvCmdLine, set in a wrapped command's environment on Windows, is the command's raw command
// line (cmd.exe's, which does not follow the argv quoting rules): the AppContainer helper
// starts the command with it instead of composing one from its arguments.
const EnvCmdLine = "CUBICLE_SANDBOX_CMDLINE"

// acPlan is what the Windows helper is handed: the container and the rules to put in place
// before the command starts.
type acPlan struct {
	// Name is the container's name (AppContainerName of the policy).
	Name string `json:"name"`
	// Rules are the access entries for the container's SID (WindowsPolicy).
	Rules []WindowsRule `json:"rules"`
	// Capabilities are the SIDs of the capabilities the command gets (network).
	Capabilities []string `json:"capabilities,omitempty"`
	// Scratch is the command's own temporary directory (TEMP and TMP), read-write.
	Scratch string `json:"scratch"`
}

// AppContainerName is the container of policy p: one per set of read-write paths (compared
// without case, as Windows does), so a grant made for one working directory is never held by
// the commands of another. At most 64 characters, as Windows requires.
func AppContainerName(p Policy) string {
	rw := make([]string, 0, len(p.ReadWrite))
	for _, d := range p.ReadWrite {
		rw = append(rw, strings.ToLower(filepath.Clean(d)))
	}
	slices.Sort(rw)
	rw = slices.Compact(rw)
	sum := sha256.Sum256([]byte(strings.Join(rw, "\x00")))
	return "Cubicle.HostTools." + hex.EncodeToString(sum[:10])
}

// The capability SIDs of a container's network access (the well-known capabilities
// internetClient and privateNetworkClientServer). Loopback stays closed either way.
const (
	capInternetClient             = "S-1-15-3-1"
	capPrivateNetworkClientServer = "S-1-15-3-3"
)

// AppContainerCapabilities are the capability SIDs a command gets: the network's when the
// node lets host commands use it, none otherwise.
func AppContainerCapabilities(network bool) []string {
	if !network {
		return nil
	}
	return []string{capInternetClient, capPrivateNetworkClientServer}
}

// childEnv is env for the contained command: the helper's own variables out, TEMP and TMP
// pointed at its scratch directory, a name given twice (in any case) kept once, its last.
func childEnv(env []string, scratch string) []string {
	out := make([]string, 0, len(env)+2)
	at := map[string]int{}
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if k == "" && strings.HasPrefix(kv, "=") { // Windows' per-drive "=C:=C:\x" entries
			k, _, _ = strings.Cut(kv[1:], "=")
			k = "=" + k
		}
		key := strings.ToUpper(k)
		if i, ok := at[key]; ok {
			out[i] = kv
			return
		}
		at[key] = len(out)
		out = append(out, kv)
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case envAppContainer, EnvCmdLine:
			continue
		}
		add(kv)
	}
	if scratch != "" {
		add("TEMP=" + scratch)
		add("TMP=" + scratch)
	}
	return out
}

// envBlock is env as CreateProcess takes it with CREATE_UNICODE_ENVIRONMENT: UTF-16 strings,
// each ended by a NUL, the block by one more. Entries holding a NUL are dropped.
func envBlock(env []string) []uint16 {
	var b []uint16
	for _, kv := range env {
		if strings.ContainsRune(kv, 0) || kv == "" {
			continue
		}
		b = append(b, utf16.Encode([]rune(kv))...)
		b = append(b, 0)
	}
	if len(b) == 0 {
		b = append(b, 0)
	}
	return append(b, 0)
}
