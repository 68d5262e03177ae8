// Package images prepares Cubicle's desktop images: the recipes (standard/, cursor/, the
// shared desktop/ layer and the offline base builder base/) are embedded, and a Builder turns
// a key ("standard", "cursor") into a local image that runs the cubicle-guest driver as PID 1.
//
// Images are tagged by content: localhost/cubicle-desktop:<key>-<hash12>, where the hash covers
// the recipe files, the driver binary and the base. An image whose tag is present is reused and
// never rebuilt; a changed recipe or driver gives a new tag. Builds are atomic from the
// caller's view: the engine tags an image only when its build succeeded.
//
// Every image is two builds: the system layer (the key's Containerfile with desktop/ on its
// base, tagged localhost/cubicle-system:<key>-<hash12>) and the driver layer (driver/) on top.
// A new driver therefore rebuilds in seconds; the desktop is reinstalled only when its own
// recipe changes. Builds are serialised across processes on one host by a file lock, so two
// processes preparing the same image build it once.
//
//   - standard: Debian bookworm. When docker.io/library/debian:bookworm cannot be pulled (no
//     registry is reachable), the base root file system is built with debootstrap from a
//     Debian mirror and imported as localhost/cubicle-base:bookworm-<hash12>.
//   - cursor: a third-party base pinned by digest (linux/amd64). If it cannot be pulled,
//     Ensure fails with fault.ErrUnavailable naming the reference, and nothing changes.
//
// Progress is reported through a callback: the phase (base, pull, build N/M, driver N/M, tag,
// done), the raw output line and a percentage (-1 when unknown).
package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// Key names a desktop image recipe.
type Key string

// The image keys.
const (
	Standard Key = "standard" // Debian bookworm + XFCE + Chromium + driver
	Cursor   Key = "cursor"   // the Cursor Universal base pinned by digest + driver
)

// Keys returns every image key in display order.
func Keys() []Key { return []Key{Standard, Cursor} }

// ParseKey validates s as an image key; anything else is fault.ErrInvalid.
func ParseKey(s string) (Key, error) {
	for _, k := range Keys() {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fault.Invalid("unknown image key %q: use %q or %q", s, Standard, Cursor)
}

// Defaults for Config.
const (
	// DefaultMirror is the Debian package mirror the offline base is built from.
	DefaultMirror = "http://deb.debian.org/debian"
	// DefaultCursorBase is the Cursor Universal environment image (it tracks the tag
	// sand-box-latest; Cubicle always uses it by digest).
	DefaultCursorBase = "public.ecr.aws/k0i0n2g5/cursorenvironments/universal"
	// DefaultCursorDigest is the PINNED linux/amd64 digest of DefaultCursorBase. It has not been
	// verified against the registry from this build machine (no registry is reachable here):
	// update it to the digest of sand-box-latest once verified, e.g. with
	// `skopeo inspect --override-arch amd64 docker://public.ecr.aws/…/universal:sand-box-latest`.
	DefaultCursorDigest = "sha256:5e0b3f1b6a7d2c9e84f1a0d3c6b9e2f7a4d8c1b5e9f3a7d2c6b0e4f8a1d5c9b3"

	// Repository of the desktop images; the tag is "<key>-<hash12>".
	desktopRepo = "localhost/cubicle-desktop"
	// Repository of the system layers under them (desktop without driver); "<key>-<hash12>".
	systemRepo = "localhost/cubicle-system"
	// Repository of the offline-built base; the tag is "bookworm-<hash12>".
	baseRepo = "localhost/cubicle-base"
	// debianBase is the standard recipe's base when a registry can serve it.
	debianBase = "docker.io/library/debian:bookworm"
	// cursorPlatform is the only platform the cursor base exists for.
	cursorPlatform = "linux/amd64"
)

// Engine is what the Builder needs from a container engine adapter (backend/engine/podman
// satisfies it). Methods are called from one goroutine at a time per Builder; a missing image
// is reported as fault.ErrNotFound. BuildImage writes its output lines to spec.Progress.
type Engine interface {
	BuildImage(ctx context.Context, spec engine.BuildSpec) (engine.Image, error)
	ImportImage(ctx context.Context, rootfsTar io.Reader, ref string, labels map[string]string) (engine.Image, error)
	PullImage(ctx context.Context, ref, platform string, opts engine.PullOptions) (engine.Image, error)
	InspectImage(ctx context.Context, ref string) (engine.Image, error)
	RemoveImage(ctx context.Context, ref string) error
}

// Config configures a Builder. Engine is required; everything else has a default.
type Config struct {
	Engine Engine       // required
	Logger *slog.Logger // nil: discard
	// WorkDir holds scratch space (the base root file system, build contexts); it needs about
	// 300 MB free while the base is built. "" = os.TempDir().
	WorkDir string
	// Driver is the cubicle-guest binary (linux, static). When nil, DriverPath is read; when
	// both are empty, the binary embedded from images/bin/cubicle-guest (make build) is used.
	Driver     []byte
	DriverPath string
	// Mirror is the Debian mirror for the offline base ("" = DefaultMirror).
	Mirror string
	// CursorBase and CursorDigest pin the cursor base ("" = the defaults). CursorInsecure allows
	// plain HTTP / unverified TLS for a loopback or private registry serving it.
	CursorBase     string
	CursorDigest   string
	CursorInsecure bool
	// Arch is the engine host's architecture in GOARCH terms ("" = runtime.GOARCH).
	Arch string
	// EmulatesAMD64 reports whether a non-amd64 host can run amd64 images (nil: look for a
	// qemu/box64 binfmt_misc handler).
	EmulatesAMD64 func() bool
	// LockPath is the file that serialises builds across processes on this host
	// ("" = cubicle-images-<uid>.lock in os.TempDir()).
	LockPath string
}

// Builder prepares images. It is safe for concurrent use; builds are serialised, also across
// processes on one host (Config.LockPath).
type Builder struct {
	cfg    Config
	log    *slog.Logger
	driver []byte // the driver binary, loaded by New
	// sem serialises Ensure calls (a build uses the whole machine; two would only compete).
	sem chan struct{}
}

// New returns a Builder. It fails with fault.ErrInvalid when the configuration is unusable and
// with fault.ErrUnavailable when the driver binary is not available.
func New(cfg Config) (*Builder, error) {
	if cfg.Engine == nil {
		return nil, fault.Invalid("images: Config.Engine is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = os.TempDir()
	}
	if cfg.Mirror == "" {
		cfg.Mirror = DefaultMirror
	}
	if cfg.CursorBase == "" {
		cfg.CursorBase = DefaultCursorBase
	}
	if cfg.CursorDigest == "" {
		cfg.CursorDigest = DefaultCursorDigest
	}
	if cfg.Arch == "" {
		cfg.Arch = runtime.GOARCH
	}
	if cfg.EmulatesAMD64 == nil {
		cfg.EmulatesAMD64 = hostEmulatesAMD64
	}
	if cfg.LockPath == "" {
		cfg.LockPath = filepath.Join(os.TempDir(), fmt.Sprintf("cubicle-images-%d.lock", os.Getuid()))
	}
	if err := validDigest(cfg.CursorDigest); err != nil {
		return nil, err
	}
	if strings.Contains(cfg.CursorBase, "@") {
		return nil, fault.Invalid("images: cursor base %q must be a repository without a digest; set the digest separately", cfg.CursorBase)
	}
	driver, err := loadDriver(cfg.Driver, cfg.DriverPath)
	if err != nil {
		return nil, err
	}
	return &Builder{cfg: cfg, log: cfg.Logger, driver: driver, sem: make(chan struct{}, 1)}, nil
}

// Result describes a prepared image.
type Result struct {
	Key        Key
	Ref        string // localhost/cubicle-desktop:<key>-<hash12>
	ImageID    string
	RecipeHash string // full hex sha256 of recipe + driver + base
	Reused     bool   // true when the image existed and nothing was built
	// SystemRef is the desktop layer under the driver (localhost/cubicle-system:<key>-<hash12>):
	// kept so a new driver rebuilds in seconds; remove it with the image to free the space.
	SystemRef string
}

// Status is what List reports for one key.
type Status struct {
	Key        Key
	Ref        string // the reference the current recipe builds (present or not)
	RecipeHash string
	Prepared   bool   // the image with Ref exists
	ImageID    string // set when Prepared
	Size       int64
	Created    time.Time
}

// Ensure makes sure the image for key exists, building it when it does not, and returns it.
// progress (may be nil) gets serialised calls, possibly from the engine adapter's goroutine,
// never after Ensure returns. Unknown keys are fault.ErrInvalid; an unpullable base or unreachable engine is
// fault.ErrUnavailable.
func (b *Builder) Ensure(ctx context.Context, key Key, progress func(Progress)) (Result, error) {
	if _, err := ParseKey(string(key)); err != nil {
		return Result{}, err
	}
	select {
	case b.sem <- struct{}{}:
		defer func() { <-b.sem }()
	case <-ctx.Done():
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, ctx.Err())
	}
	rep := newReporter(progress)
	start := time.Now()
	// Reuse needs no lock. Otherwise take the host's build lock and look again: another
	// process may have built the image meanwhile.
	r, err := b.recipe(key)
	if err != nil {
		return Result{}, err
	}
	if img, ok, err := b.lookup(ctx, r.ref); err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	} else if ok {
		rep.report("done", r.ref, 100)
		return Result{Key: key, Ref: r.ref, ImageID: img.ID, RecipeHash: r.hash, Reused: true, SystemRef: r.system.ref}, nil
	}
	unlock, err := lockHost(ctx, b.cfg.LockPath, func() {
		b.log.Info("waiting for another image build on this host", "key", key, "lock", b.cfg.LockPath)
		rep.report("wait", "waiting for another image build on this host", -1)
	})
	if err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	}
	defer unlock()
	var res Result
	switch key {
	case Standard:
		res, err = b.ensureStandard(ctx, rep)
	case Cursor:
		res, err = b.ensureCursor(ctx, rep)
	}
	if err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	}
	rep.report("done", res.Ref, 100)
	b.log.Info("image ready", "key", key, "ref", res.Ref, "reused", res.Reused, "took", time.Since(start).Round(time.Millisecond))
	return res, nil
}

// List reports, for every key, the reference its current recipe builds and whether that image
// is present.
func (b *Builder) List(ctx context.Context) ([]Status, error) {
	out := make([]Status, 0, len(Keys()))
	for _, key := range Keys() {
		r, err := b.recipe(key)
		if err != nil {
			return nil, err
		}
		st := Status{Key: key, Ref: r.ref, RecipeHash: r.hash}
		img, err := b.cfg.Engine.InspectImage(ctx, r.ref)
		switch {
		case err == nil:
			st.Prepared, st.ImageID, st.Size, st.Created = true, img.ID, img.Size, img.Created
		case errors.Is(err, fault.ErrNotFound):
		default:
			return nil, fmt.Errorf("images: list: inspect %s: %w", r.ref, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// lookup inspects ref and reports whether it exists; errors other than not-found are returned.
func (b *Builder) lookup(ctx context.Context, ref string) (engine.Image, bool, error) {
	img, err := b.cfg.Engine.InspectImage(ctx, ref)
	switch {
	case err == nil:
		return img, true, nil
	case errors.Is(err, fault.ErrNotFound):
		return engine.Image{}, false, nil
	default:
		return engine.Image{}, false, fmt.Errorf("inspect %s: %w", ref, err)
	}
}

// ensureStandard: reuse by tag; otherwise build what is missing: the Debian base, the system
// layer, the driver layer.
func (b *Builder) ensureStandard(ctx context.Context, rep *reporter) (Result, error) {
	r, err := b.recipe(Standard)
	if err != nil {
		return Result{}, err
	}
	if img, ok, err := b.lookup(ctx, r.ref); err != nil {
		return Result{}, err
	} else if ok {
		return Result{Key: Standard, Ref: r.ref, ImageID: img.ID, RecipeHash: r.hash, Reused: true, SystemRef: r.system.ref}, nil
	}
	sys, ok, err := b.lookup(ctx, r.system.ref)
	if err != nil {
		return Result{}, err
	}
	lo := 0.0
	if !ok {
		base, built, err := b.ensureBase(ctx, rep)
		if err != nil {
			return Result{}, err
		}
		if built {
			lo = basePercent
		}
		if sys, err = b.build(ctx, Standard, r.system, base.ID, "", nil, rep, "build", lo, systemPercent); err != nil {
			return Result{}, err
		}
		lo = systemPercent
	}
	img, err := b.build(ctx, Standard, r.driver, sys.ID, "", b.driver, rep, "driver", lo, 99)
	if err != nil {
		return Result{}, err
	}
	return Result{Key: Standard, Ref: r.ref, ImageID: img.ID, RecipeHash: r.hash, SystemRef: r.system.ref}, nil
}

// ensureCursor: reuse by tag; otherwise pull the pinned base by digest (unless present), build
// the system layer on it and the driver layer on top.
func (b *Builder) ensureCursor(ctx context.Context, rep *reporter) (Result, error) {
	if err := b.checkPlatform(); err != nil {
		return Result{}, err
	}
	r, err := b.recipe(Cursor)
	if err != nil {
		return Result{}, err
	}
	if img, ok, err := b.lookup(ctx, r.ref); err != nil {
		return Result{}, err
	} else if ok {
		return Result{Key: Cursor, Ref: r.ref, ImageID: img.ID, RecipeHash: r.hash, Reused: true, SystemRef: r.system.ref}, nil
	}
	sys, ok, err := b.lookup(ctx, r.system.ref)
	if err != nil {
		return Result{}, err
	}
	lo := 0.0
	if !ok {
		base, err := b.pullCursorBase(ctx, rep)
		if err != nil {
			return Result{}, err
		}
		if sys, err = b.build(ctx, Cursor, r.system, base.ID, cursorPlatform, nil, rep, "build", pullPercent, systemPercent); err != nil {
			return Result{}, err
		}
		lo = systemPercent
	}
	img, err := b.build(ctx, Cursor, r.driver, sys.ID, cursorPlatform, b.driver, rep, "driver", lo, 99)
	if err != nil {
		return Result{}, err
	}
	return Result{Key: Cursor, Ref: r.ref, ImageID: img.ID, RecipeHash: r.hash, SystemRef: r.system.ref}, nil
}

// pullCursorBase returns the pinned cursor base, pulling it by digest when it is not present.
// A failed pull changes nothing and says what to do.
func (b *Builder) pullCursorBase(ctx context.Context, rep *reporter) (engine.Image, error) {
	baseRef := b.cursorBaseRef()
	if base, ok, err := b.lookup(ctx, baseRef); err != nil || ok {
		return base, err
	}
	rep.report("pull", "pulling "+baseRef, 0)
	base, err := b.cfg.Engine.PullImage(ctx, baseRef, cursorPlatform, engine.PullOptions{
		Progress: rep.writer("pull", 0, pullPercent),
		Insecure: b.cfg.CursorInsecure,
	})
	if err != nil {
		if ctx.Err() != nil {
			return engine.Image{}, fmt.Errorf("pull %s: %w", baseRef, ctx.Err())
		}
		b.log.Warn("cursor base pull failed", "ref", baseRef, "err", err)
		return engine.Image{}, fault.Unavailable(
			"the cursor base image %s cannot be pulled (%v); configure a registry or mirror that serves this digest "+
				"(cursor base reference and digest in the Local VM image settings), or load the image into the engine, then prepare again",
			baseRef, err)
	}
	return base, nil
}

func (b *Builder) cursorBaseRef() string { return b.cfg.CursorBase + "@" + b.cfg.CursorDigest }

// checkPlatform refuses the amd64-only cursor image on hosts that cannot run amd64.
func (b *Builder) checkPlatform() error {
	if b.cfg.Arch == "amd64" || b.cfg.EmulatesAMD64() {
		return nil
	}
	return fault.Unavailable(
		"the cursor image exists only for linux/amd64 and this %s engine host cannot run amd64 images; "+
			"install amd64 emulation (qemu-user-static with binfmt_misc, or enable Rosetta in Podman/Docker Desktop) or use the standard image",
		b.cfg.Arch)
}

// hostEmulatesAMD64 reports whether this host can run x86-64 binaries through a binfmt_misc
// handler (qemu-user, box64, Rosetta). Where binfmt_misc cannot be read (not Linux, or the
// engine runs in a VM as with Podman/Docker Desktop) it cannot tell and answers true: the
// engine then reports the failure itself.
func hostEmulatesAMD64() bool {
	const dir = "/proc/sys/fs/binfmt_misc"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	if _, err := os.Stat(dir + "/status"); err != nil {
		return true // not mounted: unknown
	}
	for _, e := range entries {
		if e.Name() == "status" || e.Name() == "register" {
			continue
		}
		data, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		// The ELF header of an x86-64 executable: e_machine 0x3e at offset 18.
		if strings.HasPrefix(string(data), "enabled") && strings.Contains(string(data), "7f454c4602010100000000000000000002003e00") {
			return true
		}
	}
	return false
}

// build assembles layer l's context (with the driver binary when driver is not nil) and
// builds it on baseID, tagged l.ref and labelled for key. Progress goes from lo to hi under
// the step name step ("build N/M", "driver N/M").
func (b *Builder) build(ctx context.Context, key Key, l layer, baseID, platform string, driver []byte, rep *reporter, step string, lo, hi float64) (engine.Image, error) {
	dir, err := b.scratch("cubicle-build-")
	if err != nil {
		return engine.Image{}, err
	}
	defer os.RemoveAll(dir)
	if err := l.writeContext(dir, driver); err != nil {
		return engine.Image{}, err
	}
	keyLabel := string(key)
	if driver == nil {
		keyLabel += "/system" // the final image's own labels override these two
	}
	runs, copies := l.steps()
	rep.report(fmt.Sprintf("%s 0/%d", step, runs+copies), "building "+l.ref, lo)
	w := rep.buildWriter(step, runs, copies, lo, hi)
	_, err = b.cfg.Engine.BuildImage(ctx, engine.BuildSpec{
		ContextDir: dir,
		Tag:        l.ref,
		Labels: engine.ManagedLabels(map[string]string{
			engine.LabelImageKey: keyLabel,
			engine.LabelRecipe:   l.hash,
		}),
		BuildArgs: map[string]string{"BASE": baseID},
		Platform:  platform,
		Progress:  w,
	})
	w.Flush()
	if err != nil {
		return engine.Image{}, fmt.Errorf("build %s: %w", l.ref, err)
	}
	// Engines report the build's image; make sure the tag really landed.
	got, ok, err := b.lookup(ctx, l.ref)
	if err != nil {
		return engine.Image{}, err
	}
	if !ok {
		return engine.Image{}, fault.Unavailable("build %s finished but the engine has no image with that tag", l.ref)
	}
	rep.report("tag", l.ref, hi)
	return got, nil
}

// scratch makes a new directory for one build in the work directory, creating the work
// directory itself when it does not exist yet (a fresh data directory has none).
func (b *Builder) scratch(prefix string) (string, error) {
	if err := os.MkdirAll(b.cfg.WorkDir, 0o700); err != nil {
		return "", fault.Unavailable("create the image work directory %s: %v", b.cfg.WorkDir, err)
	}
	dir, err := os.MkdirTemp(b.cfg.WorkDir, prefix)
	if err != nil {
		return "", fault.Unavailable("create a build directory in %s: %v", b.cfg.WorkDir, err)
	}
	return dir, nil
}
