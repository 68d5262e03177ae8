package release

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
)

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256([]byte(content))
	return hex.EncodeToString(s[:])
}

func TestFindOrderAndSums(t *testing.T) {
	dir, second := t.TempDir(), t.TempDir()
	self := filepath.Join(t.TempDir(), "cubicle")
	selfSum := write(t, self, "the running executable")
	d := NewDist(DistConfig{Version: "1.2.0", Dirs: []string{dir, second}, Executable: func() (string, error) { return self, nil }})

	// Own platform and version with nothing in the dist dirs: the running executable.
	b, err := d.Find(runtime.GOOS, runtime.GOARCH, "")
	if err != nil || b.Path != self || b.SHA256 != selfSum || b.Source != "running executable" || b.Version != "1.2.0" {
		t.Fatalf("own platform: %+v, %v", b, err)
	}
	// A file in the second dist dir wins over the executable; one in the first over both.
	secondSum := write(t, filepath.Join(second, FileName(runtime.GOOS, runtime.GOARCH)), "second")
	if b, _ := d.Find(runtime.GOOS, runtime.GOARCH, "1.2.0"); b.SHA256 != secondSum || b.Source != "dist" {
		t.Fatalf("second dir: %+v", b)
	}
	firstSum := write(t, filepath.Join(dir, FileName(runtime.GOOS, runtime.GOARCH)), "first")
	if b, _ := d.Find(runtime.GOOS, runtime.GOARCH, ""); b.SHA256 != firstSum {
		t.Fatalf("first dir: %+v", b)
	}
	// A changed file gets a new sum (not a stale cached one).
	time.Sleep(10 * time.Millisecond)
	changed := write(t, filepath.Join(dir, FileName(runtime.GOOS, runtime.GOARCH)), "first, rebuilt")
	os.Chtimes(filepath.Join(dir, FileName(runtime.GOOS, runtime.GOARCH)), time.Now().Add(time.Second), time.Now().Add(time.Second))
	if b, _ := d.Find(runtime.GOOS, runtime.GOARCH, ""); b.SHA256 != changed {
		t.Fatalf("rebuilt file: %+v", b)
	}
	// Windows binaries end in .exe; other versions live in a directory named after them.
	winSum := write(t, filepath.Join(dir, "2.0.0", "cubicle-windows-arm64.exe"), "win 2")
	if b, err := d.Find("windows", "arm64", "2.0.0"); err != nil || b.SHA256 != winSum || b.Version != "2.0.0" {
		t.Fatalf("windows 2.0.0: %+v, %v", b, err)
	}
	// The running executable is never offered as another version.
	if _, err := d.Find(runtime.GOOS, runtime.GOARCH, "2.0.0"); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("own platform, other version: %v", err)
	}
	if !d.Offers("2.0.0") || d.Offers("3.0.0") || !d.Offers("1.2.0") {
		t.Fatal("Offers")
	}
	var seen []string
	for _, b := range d.List() {
		seen = append(seen, fmt.Sprintf("%s/%s@%s", b.OS, b.Arch, b.Version))
	}
	if got := strings.Join(seen, " "); !strings.Contains(got, "windows/arm64@2.0.0") || !strings.Contains(got, runtime.GOOS+"/"+runtime.GOARCH+"@1.2.0") || len(seen) != 2 {
		t.Fatalf("list: %s", got)
	}
}

func TestFindRefusals(t *testing.T) {
	d := NewDist(DistConfig{Version: "1.0", Dirs: []string{t.TempDir()}, Executable: func() (string, error) { return "", errors.New("none") }})
	_, err := d.Find("darwin", "arm64", "")
	if !errors.Is(err, fault.ErrNotFound) || !strings.Contains(err.Error(), "scripts/build.sh --runners") || !strings.Contains(err.Error(), "cubicle-darwin-arm64") {
		t.Fatalf("missing binary: %v", err)
	}
	for _, bad := range [][3]string{{"plan9", "amd64", ""}, {"linux", "mips", ""}, {"linux", "amd64", "../../etc"}, {"linux", "amd64", ".hidden"},
		{"linux", "amd64", strings.Repeat("9", 65)}, {"Linux", "amd64", ""}} {
		if _, err := d.Find(bad[0], bad[1], bad[2]); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("Find%q: %v, want invalid", bad, err)
		}
	}
}

func TestChannelsValidate(t *testing.T) {
	ok := Channels{Release: Channel{Version: "1.0", RolloutPercent: 100}, Canary: Channel{Version: "1.1-rc1", RolloutPercent: 10}}
	if err := ok.Validate(func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Channels{
		{Release: Channel{Version: "", RolloutPercent: 1}, Canary: ok.Canary},
		{Release: Channel{Version: "1.0", RolloutPercent: 101}, Canary: ok.Canary},
		{Release: ok.Release, Canary: Channel{Version: "1.0", RolloutPercent: -1}},
		{Release: ok.Release, Canary: Channel{Version: "a/b", RolloutPercent: 1}},
	} {
		if err := bad.Validate(nil); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	err := ok.Validate(func(v string) bool { return v == "1.0" })
	if !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "canary.version 1.1-rc1") {
		t.Fatalf("a version the server does not offer: %v", err)
	}
	if _, err := ValidChannel("beta"); !errors.Is(err, fault.ErrInvalid) {
		t.Fatal(err)
	}
	if c, _ := ValidChannel(""); c != ChannelRelease {
		t.Fatal(c)
	}
}

func TestRollout(t *testing.T) {
	// Stable: the same runner always lands in the same place; raising the percentage only adds.
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("r-%012x", i*7919)
	}
	in := func(p int) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			if InRollout(id, ChannelRelease, Channel{Version: "2", RolloutPercent: p}) {
				m[id] = true
			}
		}
		return m
	}
	if len(in(0)) != 0 || len(in(100)) != len(ids) {
		t.Fatal("0% must include none and 100% all")
	}
	p10, p50 := in(10), in(50)
	for id := range p10 {
		if !p50[id] {
			t.Fatalf("%s is in the 10%% rollout but not in the 50%% one", id)
		}
	}
	if n := len(p50); n < 400 || n > 600 {
		t.Fatalf("50%% rollout took %d of %d runners", n, len(ids))
	}
	if Bucket(ids[3], ChannelRelease) != Bucket(ids[3], ChannelRelease) {
		t.Fatal("unstable bucket")
	}
	c := Channels{Release: Channel{Version: "1", RolloutPercent: 100}, Canary: Channel{Version: "2", RolloutPercent: 100}}
	if c.Target("r-1", ChannelCanary) != "2" || c.Target("r-1", ChannelRelease) != "1" {
		t.Fatal("targets at 100%")
	}
	c.Canary.RolloutPercent = 0 // a canary runner outside the canary rollout follows release
	if c.Target("r-1", ChannelCanary) != "1" {
		t.Fatal("canary falls back to release")
	}
	c.Release.RolloutPercent = 0
	if c.Target("r-1", ChannelCanary) != "" || c.Target("r-1", ChannelRelease) != "" {
		t.Fatal("no rollout: no target")
	}
}
