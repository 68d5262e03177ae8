package sandbox

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"cubicle/backend/fault"
)

// TestAppContainerName: one container per set of read-write paths — the same set in another
// order or case is the same container, another set another one — and a name Windows takes.
func TestAppContainerName(t *testing.T) {
	a := AppContainerName(Policy{ReadWrite: []string{`C:\Users\u\proj`, `D:\scratch`}})
	if got := AppContainerName(Policy{ReadWrite: []string{`d:\SCRATCH`, `C:\Users\u\Proj`, `C:\Users\u\proj`}, Hidden: []string{`C:\x`}, Network: true}); got != a {
		t.Errorf("the same read-write set: %q, want %q", got, a)
	}
	for _, other := range [][]string{{`C:\Users\u\proj`}, {`C:\Users\u\proj2`, `D:\scratch`}, nil} {
		if got := AppContainerName(Policy{ReadWrite: other}); got == a {
			t.Errorf("read-write %q shares the container of another set", other)
		}
	}
	if len(a) > 64 || !strings.HasPrefix(a, "Cubicle.HostTools.") || strings.ContainsAny(a, `\/ `) {
		t.Errorf("container name %q: at most 64 characters, no separators", a)
	}
}

// TestAppContainerCapabilities: no network capability unless the node allows the network.
func TestAppContainerCapabilities(t *testing.T) {
	if c := AppContainerCapabilities(false); len(c) != 0 {
		t.Errorf("network off, capabilities %v", c)
	}
	if c := AppContainerCapabilities(true); !slices.Equal(c, []string{"S-1-15-3-1", "S-1-15-3-3"}) {
		t.Errorf("network on, capabilities %v", c)
	}
}

// TestChildEnv: the helper's own variables never reach the command; TEMP and TMP are its
// scratch directory; a name set twice in different case is kept once (Windows' names have no
// case), the drive entries ("=C:=…") kept apart.
func TestChildEnv(t *testing.T) {
	env := []string{"Path=C:\\Windows", "TEMP=C:\\Users\\u\\AppData\\Local\\Temp", envAppContainer + `={"name":"x"}`,
		"cubicle_sandbox_cmdline=cmd /c dir", "=C:=C:\\w", "=D:=D:\\", "PATH=C:\\bin", "tmp=old", "SystemRoot=C:\\Windows"}
	got := childEnv(env, `C:\Temp\cubicle-sandbox\ab`)
	want := []string{"PATH=C:\\bin", `TEMP=C:\Temp\cubicle-sandbox\ab`, "=C:=C:\\w", "=D:=D:\\", `TMP=C:\Temp\cubicle-sandbox\ab`, "SystemRoot=C:\\Windows"}
	if !slices.Equal(got, want) {
		t.Errorf("child environment:\n got %q\nwant %q", got, want)
	}
}

// TestEnvBlock: NUL-ended UTF-16 strings and one more NUL; an entry with a NUL is dropped
// (it would end the block early and smuggle in a variable).
func TestEnvBlock(t *testing.T) {
	b := envBlock([]string{"A=1", "B=ü\x00C=2", "D=€"})
	want := append(append(append(utf16.Encode([]rune("A=1")), 0), utf16.Encode([]rune("D=€"))...), 0, 0)
	if !slices.Equal(b, want) {
		t.Errorf("block %v, want %v", b, want)
	}
	if e := envBlock(nil); !slices.Equal(e, []uint16{0, 0}) {
		t.Errorf("empty block %v", e)
	}
}

// TestModeKinds: every kind can be forced by name; a kind of another OS is refused by New
// with what to use instead.
func TestModeKinds(t *testing.T) {
	for _, k := range []Kind{Bwrap, Landlock, Seatbelt, AppContainer, None} {
		if m, err := Mode(func(string) string { return " " + strings.ToUpper(string(k)) }); err != nil || m != k {
			t.Errorf("Mode(%s) = %q, %v", k, m, err)
		}
	}
	if _, err := Mode(func(string) string { return "chroot" }); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "appcontainer") {
		t.Errorf("an unknown mode: %v", err)
	}
	foreign := map[string][]Kind{"linux": {Seatbelt, AppContainer}, "darwin": {Bwrap, Landlock, AppContainer}, "windows": {Bwrap, Landlock, Seatbelt}}[runtime.GOOS]
	for _, k := range foreign {
		if _, err := New(k); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "not "+map[string]string{"linux": "Linux", "darwin": "macOS", "windows": "Windows"}[runtime.GOOS]) {
			t.Errorf("New(%s) on %s: %v, want it refused as another OS's", k, runtime.GOOS, err)
		}
	}
}
