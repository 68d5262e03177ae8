// Package images prepares Cubicle's desktop images: the recipes (standard/, cursor/, the
// shared desktop/ layer and the offline base builder base/) are embedded, and a Builder turns
// a key ("standard", "cursor") into a local image that runs the cubicle-guest driver as PID 1.
//
// Images are tagged by content: localhost/cubicle-desktop:<key>-<hash12>, where the hash covers
// the recipe files, the driver binary (so the architecture) and the base's pinned digest. An
// image whose tag is present is reused and never rebuilt; a changed recipe, driver or pin gives
// a new tag. Builds are atomic from the caller's view: the engine tags an image only when its
// build succeeded.
//
// Every image is two builds: the system layer (the key's Containerfile with desktop/ on its
// base, tagged localhost/cubicle-system:<key>-<hash12>) and the driver layer (driver/) on top.
// A new driver therefore rebuilds in seconds; the desktop is reinstalled only when its own
// recipe changes. Builds are serialised across processes on one host by a file lock, so two
// processes preparing the same image build it once.
//
//   - standard: Debian bookworm for the engine's architecture (linux/amd64 or linux/arm64).
//     The base is built inside the engine from the pinned image (Pins.Base, by default
//     docker.io/library/debian:bookworm-slim by digest), pulled when the engine lacks it, so
//     macOS and Windows need nothing but the engine. A Linux host without a registry builds the
//     same Debian release with debootstrap instead and imports it as
//     localhost/cubicle-base:bookworm-<hash12>. BaseSource chooses between the two (auto by
//     default: what the engine has, then the pull, then debootstrap).
//   - cursor: a third-party base pinned by digest (Pins.Cursor), linux/amd64 only; an arm64
//     engine needs amd64 emulation. If it cannot be pulled, Ensure fails with
//     fault.ErrUnavailable naming the reference, and nothing changes.
//
// The driver is built per architecture (scripts/build.sh embeds linux/amd64 and linux/arm64
// binaries); the Builder picks the one for the image's platform and checks its ELF header.
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

	// Repository of the desktop images; the tag is "<key>-<hash12>".
	desktopRepo = "localhost/cubicle-desktop"
	// Repository of the system layers under them (desktop without driver); "<key>-<hash12>".
	systemRepo = "localhost/cubicle-system"
	// Repository of the offline-built base; the tag is "bookworm-<hash12>".
	baseRepo = "localhost/cubicle-base"
	// cursorArch is the only architecture the cursor base exists for.
	cursorArch     = "amd64"
	cursorPlatform = "linux/" + cursorArch
)

// Engine is what the Builder needs from a container engine adapter (backend/engine/podman and
// backend/engine/docker satisfy it). Methods are called from one goroutine at a time per
// Builder; a missing image is reported as fault.ErrNotFound. BuildImage writes its output
// lines to spec.Progress. Info's Arch (GOARCH terms) decides the images' architecture.
type Engine interface {
	Info(ctx context.Context) (engine.Info, error)
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
	// Drivers maps a GOARCH ("amd64", "arm64") to the cubicle-guest binary for linux on it
	// (static). Driver and DriverPath add one binary each, its architecture read from its ELF
	// header. When none is given, the binaries embedded from images/bin (scripts/build.sh)
	// are used.
	Drivers    map[string][]byte
	Driver     []byte
	DriverPath string
	// Mirror is the Debian mirror for the offline base ("" = DefaultMirror).
	Mirror string
	// Pins returns the bases in force. It is called at every Ensure and List, so a changed
	// setting applies to the next preparation. nil = PinsFromEnv(os.Getenv).
	Pins func() (Pins, error)
	// BaseSource says how the standard base is obtained ("" = $CUBICLE_BASE_SOURCE, else
	// BaseAuto).
	BaseSource BaseSource
	// Arch is the standard image's architecture in GOARCH terms ("" = the engine's own, what
	// Info reports). Another architecture needs an engine that emulates it.
	Arch string
	// Emulates reports whether the engine can run images of a foreign architecture arch
	// (nil: look for a binfmt_misc handler on this host — qemu-user, box64, Rosetta — and
	// answer true where that cannot be seen, as with an engine in a VM: the engine then
	// reports the failure itself). The debootstrap path asks it about this host.
	Emulates func(arch string) bool
	// LockPath is the file that serialises builds across processes on this host
	// ("" = cubicle-images-<uid>.lock in os.TempDir()).
	LockPath string
}

// Builder prepares images. It is safe for concurrent use; builds are serialised, also across
// processes on one host (Config.LockPath).
type Builder struct {
	cfg     Config
	log     *slog.Logger
	drivers map[string][]byte // GOARCH → driver binary, loaded by New
	host    hostInfo          // what the debootstrap path needs of this host
	// sem serialises Ensure calls (a build uses the whole machine; two would only compete).
	sem chan struct{}
}

// New returns a Builder. It fails with fault.ErrInvalid when the configuration is unusable and
// with fault.ErrUnavailable when no driver binary is available.
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
	if cfg.Pins == nil {
		cfg.Pins = func() (Pins, error) { return PinsFromEnv(os.Getenv) }
	}
	src := cfg.BaseSource
	if src == "" {
		src = BaseSource(os.Getenv(EnvBaseSource))
	}
	var err error
	if cfg.BaseSource, err = ParseBaseSource(string(src)); err != nil {
		return nil, fault.Invalid("images: %s: %v", EnvBaseSource, err)
	}
	if cfg.Emulates == nil {
		cfg.Emulates = hostEmulates
	}
	if cfg.LockPath == "" {
		cfg.LockPath = filepath.Join(os.TempDir(), fmt.Sprintf("cubicle-images-%d.lock", os.Getuid()))
	}
	drivers, err := loadDrivers(cfg)
	if err != nil {
		return nil, err
	}
	return &Builder{cfg: cfg, log: cfg.Logger, drivers: drivers, host: realHost(), sem: make(chan struct{}, 1)}, nil
}

// Result describes a prepared image.
type Result struct {
	Key        Key
	Ref        string // localhost/cubicle-desktop:<key>-<hash12>
	ImageID    string
	RecipeHash string // full hex sha256 of recipe + driver + base
	Arch       string // the image's architecture (GOARCH terms)
	Reused     bool   // true when the image existed and nothing was built
	// SystemRef is the desktop layer under the driver (localhost/cubicle-system:<key>-<hash12>):
	// kept so a new driver rebuilds in seconds; remove it with the image to free the space.
	SystemRef string
}

// Status is what List reports for one key.
type Status struct {
	Key        Key
	Ref        string // the reference the current recipe builds (present or not)
	SystemRef  string // its system layer's reference (present or not)
	RecipeHash string
	Arch       string
	Prepared   bool   // the image with Ref exists
	ImageID    string // set when Prepared
	Size       int64
	Created    time.Time
}

// Ensure makes sure the image for key exists, building it when it does not, and returns it.
// progress (may be nil) gets serialised calls, possibly from the engine adapter's goroutine,
// never after Ensure returns. Unknown keys and invalid pins are fault.ErrInvalid; an
// unpullable base, a missing driver for the engine's architecture or an unreachable engine is
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
	tg, err := b.target(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	}
	if err := b.checkPlatform(key, tg); err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	}
	// Reuse needs no lock. Otherwise take the host's build lock and look again: another
	// process may have built the image meanwhile.
	r, err := b.recipe(key, tg)
	if err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	}
	if img, ok, err := b.lookup(ctx, r.ref); err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	} else if ok {
		rep.report("done", r.ref, 100)
		return r.result(img, true), nil
	}
	unlock, err := lockHost(ctx, b.cfg.LockPath, func() {
		b.log.Info("waiting for another image build on this host", "key", key, "lock", b.cfg.LockPath)
		rep.report("wait", "waiting for another image build on this host", -1)
	})
	if err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	}
	defer unlock()
	res, err := b.ensure(ctx, r, tg, rep)
	if err != nil {
		return Result{}, fmt.Errorf("images: ensure %s: %w", key, err)
	}
	rep.report("done", res.Ref, 100)
	b.log.Info("image ready", "key", key, "ref", res.Ref, "arch", res.Arch, "reused", res.Reused,
		"took", time.Since(start).Round(time.Millisecond))
	return res, nil
}

// target is what one Ensure or List builds for: the engine's architecture, the standard
// image's, and the pins in force.
type target struct {
	engineArch string
	stdArch    string
	pins       Pins
}

// target asks the engine for its architecture and reads the pins.
func (b *Builder) target(ctx context.Context) (target, error) {
	info, err := b.cfg.Engine.Info(ctx)
	if err != nil {
		return target{}, fmt.Errorf("ask the engine for its architecture: %w", err)
	}
	tg := target{engineArch: normalizeArch(info.Arch), stdArch: b.cfg.Arch}
	if tg.stdArch == "" {
		if err := supportedArch(tg.engineArch); err != nil {
			return target{}, err
		}
		tg.stdArch = tg.engineArch
	} else if err := supportedArch(tg.stdArch); err != nil {
		return target{}, err
	}
	if tg.pins, err = b.cfg.Pins(); err != nil {
		return target{}, fmt.Errorf("image sources: %w", err)
	}
	return tg, nil
}

// normalizeArch turns the architecture names engines report into GOARCH terms.
func normalizeArch(a string) string {
	switch a {
	case "x86_64", "x86-64":
		return "amd64"
	case "aarch64", "arm64/v8":
		return "arm64"
	}
	return a
}

// List reports, for every key, the reference its current recipe builds and whether that image
// is present. A key that cannot be built for this engine (the cursor image on arm64 without
// emulation) is listed with the reference it would have.
func (b *Builder) List(ctx context.Context) ([]Status, error) {
	tg, err := b.target(ctx)
	if err != nil {
		return nil, fmt.Errorf("images: list: %w", err)
	}
	out := make([]Status, 0, len(Keys()))
	for _, key := range Keys() {
		r, err := b.recipe(key, tg)
		if err != nil {
			return nil, fmt.Errorf("images: list: %w", err)
		}
		st := Status{Key: key, Ref: r.ref, SystemRef: r.system.ref, RecipeHash: r.hash, Arch: r.arch}
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

// ensure builds what r lacks, under the host's build lock: reuse by tag; otherwise the base
// (the standard Debian base, or the pinned cursor base), the system layer when it is missing,
// and the driver layer.
func (b *Builder) ensure(ctx context.Context, r recipe, tg target, rep *reporter) (Result, error) {
	if img, ok, err := b.lookup(ctx, r.ref); err != nil {
		return Result{}, err
	} else if ok {
		return r.result(img, true), nil
	}
	platform := platformFor(r.arch, tg.engineArch)
	sys, ok, err := b.lookup(ctx, r.system.ref)
	if err != nil {
		return Result{}, err
	}
	lo := 0.0
	if !ok {
		var base baseImage
		switch r.key {
		case Standard:
			if base, err = b.ensureBase(ctx, rep, r.arch, tg.pins.Base); err != nil {
				return Result{}, err
			}
			if base.built {
				lo = basePercent
			}
		case Cursor:
			if base.img, err = b.pullCursorBase(ctx, rep, tg.pins.Cursor); err != nil {
				return Result{}, err
			}
			base.origin, lo = tg.pins.Cursor.Ref(), pullPercent
		}
		labels := map[string]string{LabelBase: base.origin}
		if sys, err = b.build(ctx, r.key, r.system, base.img.ID, platform, nil, labels, rep, "build", lo, systemPercent); err != nil {
			return Result{}, err
		}
		lo = systemPercent
	}
	img, err := b.build(ctx, r.key, r.driver, sys.ID, platform, r.driverBin, nil, rep, "driver", lo, 99)
	if err != nil {
		return Result{}, err
	}
	return r.result(img, false), nil
}

// pullCursorBase returns the pinned cursor base, pulling it by digest when it is not present.
// A failed pull changes nothing and says what to do.
func (b *Builder) pullCursorBase(ctx context.Context, rep *reporter, pin Pin) (engine.Image, error) {
	baseRef := pin.Ref()
	if base, ok, err := b.lookup(ctx, baseRef); err != nil || ok {
		return base, err
	}
	rep.report("pull", "pulling "+baseRef, 0)
	base, err := b.cfg.Engine.PullImage(ctx, baseRef, cursorPlatform, engine.PullOptions{
		Progress: rep.writer("pull", 0, pullPercent),
		Insecure: pin.loopback(),
	})
	if err != nil {
		if ctx.Err() != nil {
			return engine.Image{}, fmt.Errorf("pull %s: %w", baseRef, ctx.Err())
		}
		b.log.Warn("cursor base pull failed", "ref", baseRef, "err", err)
		return engine.Image{}, fault.Unavailable(
			"the cursor base image %s cannot be pulled (%v); configure a registry or mirror that serves this digest "+
				"(Settings → Local VM → image sources, or %s and %s), or load the image into the engine, then prepare again",
			baseRef, err, EnvCursorBase, EnvCursorDigest)
	}
	return base, nil
}

// checkPlatform refuses an image the engine cannot run: the amd64-only cursor image, or a
// standard image for another architecture, on an engine that does not emulate it.
func (b *Builder) checkPlatform(key Key, tg target) error {
	arch := tg.stdArch
	if key == Cursor {
		arch = cursorArch
	}
	if arch == tg.engineArch || b.cfg.Emulates(arch) {
		return nil
	}
	if key == Cursor {
		return fault.Unavailable(
			"the cursor image exists only for linux/amd64 and this %s engine cannot run amd64 images; "+
				"install amd64 emulation (qemu-user-static with binfmt_misc, or enable Rosetta in Podman/Docker Desktop) or use the standard image",
			tg.engineArch)
	}
	return fault.Unavailable("the standard image for linux/%s cannot run on this linux/%s engine: install %s emulation "+
		"(qemu-user-static with binfmt_misc) or build for the engine's own architecture", arch, tg.engineArch, arch)
}

// build assembles layer l's context (with the driver binary when driver is not nil) and
// builds it on baseID, tagged l.ref and labelled for key (plus extra). Progress goes from lo to hi under
// the step name step ("build N/M", "driver N/M").
func (b *Builder) build(ctx context.Context, key Key, l layer, baseID, platform string, driver []byte, extra map[string]string, rep *reporter, step string, lo, hi float64) (engine.Image, error) {
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
	labels := engine.ManagedLabels(map[string]string{
		engine.LabelImageKey: keyLabel,
		engine.LabelRecipe:   l.hash,
	})
	for k, v := range extra {
		labels[k] = v
	}
	_, err = b.cfg.Engine.BuildImage(ctx, engine.BuildSpec{
		ContextDir: dir,
		Tag:        l.ref,
		Labels:     labels,
		BuildArgs:  map[string]string{"BASE": baseID},
		Platform:   platform,
		Progress:   w,
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
