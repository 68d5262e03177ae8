package images

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// ensureBase returns a Debian bookworm base image for the standard recipe, in this order: the
// offline base already imported, docker.io/library/debian:bookworm (present or pullable), or a
// fresh offline base built with debootstrap and imported. built reports the last case (it took
// the first basePercent of the progress bar).
func (b *Builder) ensureBase(ctx context.Context, rep *reporter) (img engine.Image, built bool, err error) {
	ref := baseRepo + ":bookworm-" + b.baseHash()[:12]
	if img, ok, err := b.lookup(ctx, ref); err != nil || ok {
		return img, false, err
	}
	if img, ok, err := b.lookup(ctx, debianBase); err != nil || ok {
		return img, false, err
	}
	rep.report("base", "pulling "+debianBase, 0)
	img, err = b.cfg.Engine.PullImage(ctx, debianBase, "", engine.PullOptions{Progress: rep.writer("base", 0, 1)})
	if err == nil {
		return img, false, nil
	}
	if ctx.Err() != nil {
		return engine.Image{}, false, fmt.Errorf("pull %s: %w", debianBase, ctx.Err())
	}
	b.log.Info("Debian base cannot be pulled; building it offline with debootstrap", "ref", debianBase, "err", err, "mirror", b.cfg.Mirror)
	rep.report("base", fmt.Sprintf("%s cannot be pulled; building the base with debootstrap from %s", debianBase, b.cfg.Mirror), 1)
	img, err = b.buildBase(ctx, ref, rep)
	if err != nil {
		return engine.Image{}, false, err
	}
	return img, true, nil
}

// buildBase runs the offline base recipe (base/debootstrap.sh) into a scratch directory, tars
// it and imports it as ref.
func (b *Builder) buildBase(ctx context.Context, ref string, rep *reporter) (engine.Image, error) {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return engine.Image{}, fault.Unavailable("%s cannot be pulled and debootstrap is not installed to build it offline: install debootstrap (apt-get install debootstrap) or make a registry serving %s reachable", debianBase, debianBase)
	}
	if os.Geteuid() != 0 {
		return engine.Image{}, fault.Unavailable("%s cannot be pulled and building it offline with debootstrap needs root: run the image build as root once, or make a registry serving %s reachable", debianBase, debianBase)
	}
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
	cmd := exec.CommandContext(ctx, "sh", "-s", root, b.cfg.Mirror)
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
	img, err := b.importDir(ctx, root, ref)
	if err != nil {
		return engine.Image{}, err
	}
	rep.report("base", "imported "+ref, basePercent)
	return img, nil
}

// importDir streams `tar -C root -c .` into the engine as ref.
func (b *Builder) importDir(ctx context.Context, root, ref string) (engine.Image, error) {
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
		engine.LabelRecipe:   b.baseHash(),
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
