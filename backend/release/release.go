// Package release is what a server offers its runners (SPEC §4, issue 12 item 5): the
// `cubicle` binaries it can hand out per os/arch and version (Dist), and the update channels
// release and canary, each a version and a rollout percentage (Channels), from which a
// runner's target version follows (Target).
//
// Binaries come from the server's own build: the running executable serves its own os/arch
// and version; other platforms and versions are files named cubicle-<os>-<arch> (".exe" on
// Windows) in a dist directory (scripts/build.sh --runners writes them next to bin/cubicle),
// and other versions sit in a subdirectory named after the version. Every binary is offered
// with its SHA-256 so a runner can verify what it downloaded.
package release

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"cubicle/backend/fault"
)

// Platforms a runner binary is offered for.
var (
	OSes   = []string{"linux", "darwin", "windows"}
	Arches = []string{"amd64", "arm64"}
)

// Binary is one `cubicle` binary the server offers.
type Binary struct {
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
	// Source says where it comes from: "running executable" or "dist".
	Source string `json:"source"`
	Path   string `json:"-"`
}

// FileName is the name of the binary for goos/goarch in a dist directory.
func FileName(goos, goarch string) string {
	n := "cubicle-" + goos + "-" + goarch
	if goos == "windows" {
		n += ".exe"
	}
	return n
}

// Dist finds the binaries a server offers. The zero value is not usable: use NewDist.
type Dist struct {
	version string
	dirs    []string
	self    func() (string, error)

	mu   sync.Mutex
	sums map[string]sum // by path
}

type sum struct {
	size  int64
	mod   time.Time
	value string
}

// DistConfig configures a Dist.
type DistConfig struct {
	// Version is the server's own version: the running executable's and that of the binaries
	// directly in a dist directory.
	Version string
	// Dirs are the dist directories, searched in order.
	Dirs []string
	// Executable returns the running executable (default os.Executable); nil result = none.
	Executable func() (string, error)
}

// NewDist returns a Dist.
func NewDist(cfg DistConfig) *Dist {
	if cfg.Executable == nil {
		cfg.Executable = os.Executable
	}
	return &Dist{version: cfg.Version, dirs: slices.Clone(cfg.Dirs), self: cfg.Executable, sums: map[string]sum{}}
}

// Version is the server's own version.
func (d *Dist) Version() string { return d.version }

// ValidPlatform checks a requested os/arch.
func ValidPlatform(goos, goarch string) error {
	if !slices.Contains(OSes, goos) || !slices.Contains(Arches, goarch) {
		return fault.Invalid("os %q / arch %q: ask for os=%s and arch=%s", goos, goarch,
			strings.Join(OSes, "|"), strings.Join(Arches, "|"))
	}
	return nil
}

// ValidVersion checks a version name (it names a directory, so no separators).
func ValidVersion(v string) error {
	if v == "" || len(v) > 64 || v[0] == '.' || strings.ContainsFunc(v, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == '+' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return fault.Invalid("version %q: 1–64 characters of letters, digits and . _ + - (e.g. 1.4.0 or v1.4.0-3-gabc123)", v)
	}
	return nil
}

// Find returns the binary for goos/goarch of version ("" = the server's own), or a
// fault.ErrNotFound error saying how to build one.
func (d *Dist) Find(goos, goarch, version string) (Binary, error) {
	if err := ValidPlatform(goos, goarch); err != nil {
		return Binary{}, err
	}
	if version == "" {
		version = d.version
	}
	if err := ValidVersion(version); err != nil {
		return Binary{}, err
	}
	for _, p := range d.candidates(goos, goarch, version) {
		if b, err := d.binary(p.path, goos, goarch, version, p.source); err == nil {
			return b, nil
		}
	}
	return Binary{}, fault.NotFound("this server has no cubicle binary for %s/%s of version %s: build one with "+
		"`scripts/build.sh --runners` (it writes bin/%s next to bin/cubicle) or put it in the dist directory "+
		"(cubicle serve --dist-dir DIR; other versions in DIR/<version>/)", goos, goarch, version, FileName(goos, goarch))
}

type candidate struct{ path, source string }

func (d *Dist) candidates(goos, goarch, version string) []candidate {
	name := FileName(goos, goarch)
	var out []candidate
	for _, dir := range d.dirs {
		out = append(out, candidate{filepath.Join(dir, version, name), "dist"})
		if version == d.version {
			out = append(out, candidate{filepath.Join(dir, name), "dist"})
		}
	}
	if goos == runtime.GOOS && goarch == runtime.GOARCH && version == d.version {
		if exe, err := d.self(); err == nil && exe != "" {
			out = append(out, candidate{exe, "running executable"})
		}
	}
	return out
}

// List returns every binary the server offers for every platform: its own version's and those
// of the versions in its dist directories.
func (d *Dist) List() []Binary {
	versions := []string{d.version}
	for _, dir := range d.dirs {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() && ValidVersion(e.Name()) == nil && !slices.Contains(versions, e.Name()) {
				versions = append(versions, e.Name())
			}
		}
	}
	var out []Binary
	for _, v := range versions {
		for _, goos := range OSes {
			for _, goarch := range Arches {
				if b, err := d.Find(goos, goarch, v); err == nil {
					out = append(out, b)
				}
			}
		}
	}
	return out
}

// Offers reports whether some binary of version exists.
func (d *Dist) Offers(version string) bool {
	for _, b := range d.List() {
		if b.Version == version {
			return true
		}
	}
	return false
}

// binary describes the regular file at path, its SHA-256 computed once per size and mtime.
func (d *Dist) binary(path, goos, goarch, version, source string) (Binary, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Binary{}, err
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return Binary{}, fmt.Errorf("%s is not a binary", path)
	}
	d.mu.Lock()
	s, ok := d.sums[path]
	d.mu.Unlock()
	if !ok || s.size != fi.Size() || !s.mod.Equal(fi.ModTime()) {
		f, err := os.Open(path)
		if err != nil {
			return Binary{}, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return Binary{}, err
		}
		s = sum{size: fi.Size(), mod: fi.ModTime(), value: hex.EncodeToString(h.Sum(nil))}
		d.mu.Lock()
		d.sums[path] = s
		d.mu.Unlock()
	}
	return Binary{OS: goos, Arch: goarch, Version: version, SHA256: s.value, Size: s.size, Source: source, Path: path}, nil
}

// Open opens b's file for reading.
func (b Binary) Open() (*os.File, error) { return os.Open(b.Path) }

// Channel names.
const (
	ChannelRelease = "release"
	ChannelCanary  = "canary"
)

// Channel is one update channel: the version its runners should run, and which share of
// them (by a stable hash of the runner's id) gets it.
type Channel struct {
	Version        string `json:"version"`
	RolloutPercent int    `json:"rolloutPercent"`
}

// Channels are the release and canary channels.
type Channels struct {
	Release Channel `json:"release"`
	Canary  Channel `json:"canary"`
}

// Defaults are the channels before an administrator set them: release offers the server's own
// version to every runner, canary to none.
func Defaults(serverVersion string) Channels {
	return Channels{Release: Channel{Version: serverVersion, RolloutPercent: 100},
		Canary: Channel{Version: serverVersion, RolloutPercent: 0}}
}

// Validate checks channels an administrator sends; offers says whether the server can hand out
// a version (nil = do not check).
func (c Channels) Validate(offers func(version string) bool) error {
	for _, ch := range []struct {
		name string
		c    Channel
	}{{ChannelRelease, c.Release}, {ChannelCanary, c.Canary}} {
		if err := ValidVersion(ch.c.Version); err != nil {
			return fault.Invalid("%s.version: %v", ch.name, err)
		}
		if ch.c.RolloutPercent < 0 || ch.c.RolloutPercent > 100 {
			return fault.Invalid("%s.rolloutPercent %d: send 0..100 (the share of the channel's runners that get %s)",
				ch.name, ch.c.RolloutPercent, ch.c.Version)
		}
		if offers != nil && !offers(ch.c.Version) {
			return fault.Invalid("%s.version %s: this server offers no binary of that version; put cubicle-<os>-<arch> "+
				"files in <dist dir>/%s/ first (or choose the server's own version)", ch.name, ch.c.Version, ch.c.Version)
		}
	}
	return nil
}

// ValidChannel checks a runner's channel name ("" = release).
func ValidChannel(name string) (string, error) {
	switch name {
	case "", ChannelRelease:
		return ChannelRelease, nil
	case ChannelCanary:
		return ChannelCanary, nil
	}
	return "", fault.Invalid(`channel %q: send {"channel": "release"} or {"channel": "canary"}`, name)
}

// Bucket places runnerID in 0..99 for channel, stably: the same runner is always in the same
// place, so raising a rollout percentage only adds runners.
func Bucket(runnerID, channel string) int {
	h := sha256.Sum256([]byte(channel + "\x00" + runnerID))
	return int(binary.BigEndian.Uint32(h[:4]) % 100)
}

// InRollout reports whether runnerID is among the rollout of c.
func InRollout(runnerID, channel string, c Channel) bool {
	return Bucket(runnerID, channel) < c.RolloutPercent
}

// Target is the version runnerID of channel should run, "" when it is in no rollout (it keeps
// what it runs). A canary runner outside the canary rollout follows the release channel.
func (c Channels) Target(runnerID, channel string) string {
	if channel == ChannelCanary && InRollout(runnerID, ChannelCanary, c.Canary) {
		return c.Canary.Version
	}
	if InRollout(runnerID, ChannelRelease, c.Release) {
		return c.Release.Version
	}
	return ""
}
