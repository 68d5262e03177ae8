package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// PeersRepo is the repository of the derived image holding the peer tools; its tag is a hash
// of the standard image's id, peersContainerfile and its label, so a new standard image or package list
// gives a new tag and an existing tag is reused.
const PeersRepo = "localhost/cubicle-bench-peers"

// labelPeersOf on a peers image names the standard image it was derived from.
const labelPeersOf = wire.LabelBenchPeersOf

// PeerPackages are the tools other agent desktops use (the Anthropic computer-use demo takes
// screenshots with scrot + ImageMagick, sends input with xdotool and shows the desktop to
// people with x11vnc; xclip is the usual way to reach an X clipboard from a script). They are installed only in the benchmark's derived image, never in the
// product's images.
var PeerPackages = []string{"scrot", "imagemagick", "xdotool", "x11vnc", "xclip"}

// peersContainerfile adds the peer tools to the standard image and returns to its user; the
// entrypoint (the driver), working directory and environment are inherited unchanged. The
// standard image keeps Debian's sources.list from its base, so apt reaches the same mirror
// its own build used.
//
// ImageMagick brings fonts (Ghostscript's URW set, CMaps), and the font caches their install
// writes record the font directories' mtimes to the nanosecond, which the image layer cuts to
// whole seconds: every GTK program of the desktop would rescan the fonts at start and write a
// copy under ~/.cache, about 0.4 CPU-seconds that the standard image does not spend (measured:
// xfwm4 510 vs 320 ms, xfsettingsd 160 vs 40 ms). The last step does what the standard image's
// setup does (images/desktop/setup.sh), so the bench's desktops start as the product's do;
// it follows symbolic links (-L), as poppler-data's CMap directories are linked into
// /usr/share/fonts/cmap from outside it.
func peersContainerfile() string {
	return `# Cubicle benchmark: the standard desktop plus the peer tools (scrot, ImageMagick, xdotool, x11vnc).
ARG BASE
FROM ${BASE}
USER root
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ` + strings.Join(PeerPackages, " ") + ` \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && now=$(date +%s) \
 && for d in /usr/share/fonts /usr/local/share/fonts /usr/share/X11/fonts; do \
      if [ -d "$d" ]; then find -L "$d" -type d -exec touch -m -d "@$now" {} + 2>/dev/null || true; fi; \
    done \
 && fc-cache -s -f
USER cua
`
}

// peersRef is the tag of the peers image for the standard image with id standardID.
func peersRef(standardID string) string {
	h := sha256.Sum256([]byte(standardID + "\x00" + peersContainerfile() + "\x00" + labelPeersOf))
	return PeersRepo + ":" + hex.EncodeToString(h[:])[:12]
}

// ensurePeers returns the peers image for the standard image standardID, building it when it
// does not exist yet (about a minute: apt downloads ~15 MB).
// The image is claimed for the run (usePeers) until Run returns.
func (r *runner) ensurePeers(ctx context.Context, standardID string) (engine.Image, string, bool, error) {
	ref := peersRef(standardID)
	release, err := usePeers(ref)
	if err != nil {
		return engine.Image{}, ref, false, err
	}
	r.releasePeers = release
	img, err := r.cfg.Engine.InspectImage(ctx, ref)
	if err == nil {
		return img, ref, true, nil
	}
	if !errors.Is(err, fault.ErrNotFound) {
		return engine.Image{}, ref, false, fmt.Errorf("bench: inspect %s: %w", ref, err)
	}
	r.progress("building the peer tools image %s (%s) on the standard image", ref, strings.Join(PeerPackages, ", "))
	dir, err := os.MkdirTemp(r.runRoot, "peers-build-")
	if err != nil {
		return engine.Image{}, ref, false, fault.Unavailable("bench: create a build directory: %v", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(peersContainerfile()), 0o644); err != nil {
		return engine.Image{}, ref, false, fault.Unavailable("bench: write the peers Containerfile: %v", err)
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() { // owned: ends when pw is closed below
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "STEP") || strings.HasPrefix(line, "Step") {
				r.progress("  %s", line)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	_, err = r.cfg.Engine.BuildImage(ctx, engine.BuildSpec{
		ContextDir: dir,
		Tag:        ref,
		Labels:     map[string]string{labelPeersOf: standardID},
		BuildArgs:  map[string]string{"BASE": standardID},
		Progress:   pw,
	})
	pw.Close()
	<-done
	if err != nil {
		if ctx.Err() != nil {
			return engine.Image{}, ref, false, ctx.Err()
		}
		return engine.Image{}, ref, false, fmt.Errorf("bench: build the peer tools image %s (it needs Debian's package mirror): %w", ref, err)
	}
	img, err = r.cfg.Engine.InspectImage(ctx, ref)
	if err != nil {
		return engine.Image{}, ref, false, fmt.Errorf("bench: the peer tools image %s was built but cannot be inspected: %w", ref, err)
	}
	r.prunePeers(ctx, img.ID)
	return img, ref, false, nil
}

// prunePeers removes the peer tools images of earlier standard images (each is ~100 MB over
// its standard image), so that only the current one is kept. One still in use by a container,
// or claimed by a run going on in another process (another checkout's standard image, on a
// shared machine), stays; failures are only logged.
func (r *runner) prunePeers(ctx context.Context, keepID string) {
	all, err := r.cfg.Engine.ListImages(ctx, nil)
	if err != nil {
		r.log.Warn("list earlier peer tools images", "err", err)
		return
	}
	for _, img := range all {
		var tags []string
		for _, n := range img.Names {
			if strings.HasPrefix(n, PeersRepo+":") {
				tags = append(tags, n)
			}
		}
		if img.ID == keepID || len(tags) == 0 {
			continue
		}
		if !r.claimAll(tags) {
			r.progress("kept the earlier peer tools image %s: a run in another process uses it", strings.Join(tags, ", "))
			continue
		}
		err := r.cfg.Engine.RemoveImage(ctx, img.ID)
		r.releaseClaims()
		if err != nil {
			r.log.Warn("remove an earlier peer tools image", "image", img.ID, "names", img.Names, "err", err)
			continue
		}
		r.progress("removed the earlier peer tools image %s", strings.Join(img.Names, ", "))
	}
}

// claimAll claims every tag for removal (claimUnused), or none: false when a run uses one.
// releaseClaims gives them back.
func (r *runner) claimAll(tags []string) bool {
	for _, tag := range tags {
		release, ok := claimUnused(tag)
		if !ok {
			r.releaseClaims()
			return false
		}
		r.claims = append(r.claims, release)
	}
	return true
}

func (r *runner) releaseClaims() {
	for _, release := range r.claims {
		release()
	}
	r.claims = nil
}
