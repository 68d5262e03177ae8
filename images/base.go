package images

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// BaseSource says how the standard recipe's Debian base is obtained.
type BaseSource string

// The base sources.
const (
	// BaseAuto uses the pinned base when the engine has it or can pull it, and otherwise builds
	// the same Debian release on the host with debootstrap (Linux hosts with debootstrap, as
	// root, for the host's own architecture). The default.
	BaseAuto BaseSource = "auto"
	// BasePull only pulls the pinned base; the host debootstrap path is never used (macOS and
	// Windows work this way in any case; tests use it to prove the pull path).
	BasePull BaseSource = "pull"
	// BaseDebootstrap only builds the base on the host and never contacts a registry (an
	// offline Linux machine where a pull would only wait for a timeout).
	BaseDebootstrap BaseSource = "debootstrap"
)

// ParseBaseSource reads a BaseSource ("" = BaseAuto).
func ParseBaseSource(s string) (BaseSource, error) {
	switch v := BaseSource(strings.ToLower(strings.TrimSpace(s))); v {
	case "":
		return BaseAuto, nil
	case BaseAuto, BasePull, BaseDebootstrap:
		return v, nil
	}
	return "", fault.Invalid("base source %q: use %q, %q or %q", s, BaseAuto, BasePull, BaseDebootstrap)
}

// LabelBase is the image label that records which base a system layer was built on: the
// pinned reference it was pulled as, or "debootstrap <recipe hash>" for the offline base.
const LabelBase = "io.cubicle.base"

// baseImage is the base a standard system layer is built on and where it came from.
type baseImage struct {
	img    engine.Image
	origin string // LabelBase's value
	built  bool   // built with debootstrap now (it took the first basePercent of the bar)
}

// offlineBaseRef is the tag of the base built with debootstrap for arch.
func (b *Builder) offlineBaseRef(arch string) string {
	return baseRepo + ":bookworm-" + b.baseHash(arch)[:12]
}

// ensureBase returns the Debian base for the standard recipe on arch, following the base
// source (see BaseSource). A base the engine has already is used without a pull or a build.
func (b *Builder) ensureBase(ctx context.Context, rep *reporter, arch string, pin Pin) (baseImage, error) {
	offline := b.offlineBaseRef(arch)
	origin := "debootstrap " + b.baseHash(arch)
	switch b.cfg.BaseSource {
	case BaseDebootstrap:
		if img, ok, err := b.lookup(ctx, offline); err != nil || ok {
			return baseImage{img: img, origin: origin}, err
		}
		if why := b.debootstrapUnavailable(arch); why != "" {
			return baseImage{}, fault.Unavailable("the Debian base cannot be built on this host (%s=%s): %s; "+
				"unset %s to pull the pinned base %s instead", EnvBaseSource, BaseDebootstrap, why, EnvBaseSource, pin.Ref())
		}
		img, err := b.buildBase(ctx, offline, arch, rep)
		return baseImage{img: img, origin: origin, built: true}, err
	case BasePull:
		img, err := b.pullBase(ctx, rep, arch, pin)
		if err != nil && ctx.Err() == nil {
			err = fault.Unavailable("the Debian base %s cannot be pulled (%v), and the host debootstrap path is turned off "+
				"(%s=%s): %s", pin.Ref(), err, EnvBaseSource, BasePull, baseFix)
		}
		return baseImage{img: img, origin: pin.Ref()}, err
	}
	// auto: what the engine has first, then the registry, then debootstrap on the host.
	if img, ok, err := b.lookupPinned(ctx, pin.Ref(), arch); err != nil || ok {
		return baseImage{img: img, origin: pin.Ref()}, err
	}
	if img, ok, err := b.lookup(ctx, offline); err != nil || ok {
		return baseImage{img: img, origin: origin}, err
	}
	img, perr := b.pullBase(ctx, rep, arch, pin)
	if perr == nil {
		return baseImage{img: img, origin: pin.Ref()}, nil
	}
	if ctx.Err() != nil {
		return baseImage{}, perr
	}
	if why := b.debootstrapUnavailable(arch); why != "" {
		return baseImage{}, fault.Unavailable("the Debian base %s cannot be pulled (%v), and it cannot be built on this host "+
			"instead: %s. %s", pin.Ref(), perr, why, baseFix)
	}
	b.log.Info("Debian base cannot be pulled; building it offline with debootstrap", "ref", pin.Ref(), "err", perr, "mirror", b.cfg.Mirror)
	rep.report("base", fmt.Sprintf("%s cannot be pulled; building the base with debootstrap from %s", pin.Ref(), b.cfg.Mirror), 1)
	img, err := b.buildBase(ctx, offline, arch, rep)
	return baseImage{img: img, origin: origin, built: true}, err
}

// baseFix says what to do when no base can be had.
var baseFix = fmt.Sprintf("Make the registry reachable, or point %s and %s (or Settings → Local VM → image sources) at a "+
	"mirror that serves this digest, or load the image into the engine (docker load / podman load); then prepare again",
	EnvBaseImage, EnvBaseDigest)

// lookupPinned finds ref (repo@digest) in the engine and checks it is for arch.
func (b *Builder) lookupPinned(ctx context.Context, ref, arch string) (engine.Image, bool, error) {
	img, ok, err := b.lookup(ctx, ref)
	if err != nil || !ok {
		return img, ok, err
	}
	if img.Arch != "" && img.Arch != arch {
		return engine.Image{}, false, nil // another platform's image of a multi-platform digest: pull ours
	}
	return img, true, nil
}

// pullBase returns the pinned base for arch, pulling it by digest when the engine lacks it.
func (b *Builder) pullBase(ctx context.Context, rep *reporter, arch string, pin Pin) (engine.Image, error) {
	ref := pin.Ref()
	if img, ok, err := b.lookupPinned(ctx, ref, arch); err != nil || ok {
		return img, err
	}
	rep.report("base", "pulling "+ref, 0)
	img, err := b.cfg.Engine.PullImage(ctx, ref, "linux/"+arch, engine.PullOptions{
		Progress: rep.writer("base", 0, 1),
		Insecure: pin.loopback(),
	})
	if err != nil {
		if ctx.Err() != nil {
			return engine.Image{}, fmt.Errorf("pull %s: %w", ref, ctx.Err())
		}
		b.log.Info("base pull failed", "ref", ref, "err", err)
		return engine.Image{}, err
	}
	if img.Arch != "" && img.Arch != arch {
		return engine.Image{}, fault.Unavailable("the base %s is an image for linux/%s, and this engine needs linux/%s: "+
			"pin the digest of a multi-platform index, or of the linux/%s image", ref, img.Arch, arch, arch)
	}
	return img, nil
}

// debootstrapUnavailable says why the offline base cannot be built on this host for arch
// ("" when it can).
func (b *Builder) debootstrapUnavailable(arch string) string {
	h := b.host
	switch {
	case h.goos != "linux":
		return "debootstrap runs only on Linux hosts"
	case b.cfg.BaseSource == BasePull:
		return fmt.Sprintf("the host debootstrap path is turned off (%s=%s)", EnvBaseSource, BasePull)
	case !h.haveDebootstrap():
		return "debootstrap is not installed (apt-get install debootstrap)"
	case !h.root:
		return "debootstrap needs root (run the image build as root once)"
	case arch != h.goarch && !h.emulates(arch):
		return fmt.Sprintf("the image is for linux/%s and this host is linux/%s without %s emulation for debootstrap "+
			"(qemu-user-static with binfmt_misc)", arch, h.goarch, arch)
	}
	return ""
}

// hostInfo is what debootstrapUnavailable looks at; tests replace it.
type hostInfo struct {
	goos, goarch    string
	root            bool
	haveDebootstrap func() bool
	emulates        func(arch string) bool // this host runs linux/arch binaries (binfmt_misc)
}

func realHost() hostInfo {
	return hostInfo{
		goos: runtime.GOOS, goarch: runtime.GOARCH, root: os.Geteuid() == 0,
		haveDebootstrap: func() bool { _, err := exec.LookPath("debootstrap"); return err == nil },
		emulates: func(arch string) bool {
			_, err := os.Stat("/proc/sys/fs/binfmt_misc/status")
			return err == nil && hostEmulates(arch) // unknown is no here: debootstrap runs on this host
		},
	}
}

// buildBase runs the offline base recipe (base/debootstrap.sh) for arch into a scratch
// directory, tars it and imports it as ref.
func (b *Builder) buildBase(ctx context.Context, ref, arch string, rep *reporter) (engine.Image, error) {
	script, err := recipes.ReadFile("base/debootstrap.sh")
	if err != nil {
		return engine.Image{}, fmt.Errorf("read base recipe: %w", err)
	}
	tmp, err := b.scratch("cubicle-base-")
	if err != nil {
		return engine.Image{}, err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "rootfs")

	pct := 0.0
	lines := &lineWriter{fn: func(line string) {
		pct = debootstrapPercent(line, pct)
		rep.report("base", line, 1+pct*(basePercent-4))
	}}
	cmd := exec.CommandContext(ctx, "sh", "-s", root, b.cfg.Mirror, debianArch[arch])
	cmd.Stdin = bytes.NewReader(script)
	cmd.Stdout, cmd.Stderr = lines, lines
	cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	if err := cmd.Run(); err != nil {
		lines.Flush()
		if ctx.Err() != nil {
			return engine.Image{}, fmt.Errorf("debootstrap: %w", ctx.Err())
		}
		return engine.Image{}, fault.Unavailable("building the Debian base with debootstrap from %s failed (%v): check that the mirror is reachable or configure another Debian mirror", b.cfg.Mirror, err)
	}
	lines.Flush()

	rep.report("base", "importing "+ref, basePercent-3)
	img, err := b.importDir(ctx, root, ref, arch)
	if err != nil {
		return engine.Image{}, err
	}
	rep.report("base", "imported "+ref, basePercent)
	return img, nil
}

// importDir streams `tar -C root -c .` into the engine as ref.
func (b *Builder) importDir(ctx context.Context, root, ref, arch string) (engine.Image, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tar := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "-C", root, "-c", ".")
	out, err := tar.StdoutPipe()
	if err != nil {
		return engine.Image{}, fmt.Errorf("import base: %w", err)
	}
	var stderr bytes.Buffer
	tar.Stderr = &stderr
	if err := tar.Start(); err != nil {
		return engine.Image{}, fault.Unavailable("import base: start tar: %v", err)
	}
	img, ierr := b.cfg.Engine.ImportImage(ctx, out, ref, engine.ManagedLabels(map[string]string{
		engine.LabelImageKey: "base",
		engine.LabelRecipe:   b.baseHash(arch),
	}))
	if ierr != nil {
		cancel() // stop tar if the engine gave up early
	}
	_, _ = io.Copy(io.Discard, out) // let tar finish writing whatever the engine did not read
	werr := tar.Wait()
	if ierr != nil {
		return engine.Image{}, fmt.Errorf("import base %s: %w", ref, ierr)
	}
	if werr != nil {
		// The engine may have imported a truncated stream: never leave that tagged.
		if rerr := b.cfg.Engine.RemoveImage(ctx, ref); rerr != nil {
			b.log.Warn("remove partial base image", "ref", ref, "err", rerr)
		}
		return engine.Image{}, fault.Unavailable("import base %s: tar: %v: %s", ref, werr, strings.TrimSpace(stderr.String()))
	}
	return img, nil
}
