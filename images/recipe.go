package images

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// recipes holds the image recipes: a system layer per key (standard/, cursor/) that shares
// desktop/ (copied into its build context as desktop/), and the driver layer (driver/) built
// on top of any system layer.
//
//go:embed all:standard all:cursor all:desktop all:driver base/debootstrap.sh
var recipes embed.FS

// bin holds the driver binaries that scripts/build.sh puts at images/bin/cubicle-guest-<arch>
// (only .gitkeep in a fresh checkout).
//
//go:embed all:bin
var bin embed.FS

// hashVersion changes when the hashing scheme itself changes, so old tags are not reused.
const hashVersion = "cubicle-images/3"

// driverName is the driver's file name in the driver layer's build context.
const driverName = "cubicle-guest"

// recipe is one key's build input and identity for one architecture. An image is built in two
// layers so that a new driver (frequent) never reinstalls the desktop (slow): the system layer
// (the key's Containerfile on its base) and the driver layer on top of it.
type recipe struct {
	key       Key
	arch      string // the image's architecture (GOARCH)
	driverBin []byte // the driver for arch
	system    layer  // tagged systemRepo:<key>-<hash12>
	driver    layer  // the final image: desktopRepo:<key>-<hash12>
	hash      string
	ref       string
}

// layer is one build: its context files and identity.
type layer struct {
	files map[string][]byte // context path → content
	hash  string            // hex sha256
	ref   string            // the tag
}

// recipe assembles key's layers for tg and computes their tags. The standard image is built
// for tg.stdArch (the engine's unless Config.Arch says otherwise), the cursor image always for
// amd64. The system layer's hash
// covers the base by digest only: a mirror serving the same digest gives the same image.
func (b *Builder) recipe(key Key, tg target) (recipe, error) {
	sys, err := layerFiles(recipes, string(key), "")
	if err != nil {
		return recipe{}, fault.Invalid("images: no recipe for %q: %v", key, err)
	}
	if err := addFiles(sys, recipes, "desktop", "desktop"); err != nil {
		return recipe{}, fmt.Errorf("images: read shared desktop layer: %w", err)
	}
	drv, err := layerFiles(recipes, "driver", "")
	if err != nil {
		return recipe{}, fmt.Errorf("images: read driver layer: %w", err)
	}
	var arch, base string
	switch key {
	case Standard:
		arch = tg.stdArch
		base = fmt.Sprintf("debian bookworm linux/%s: pinned %s, or debootstrap %s", arch, tg.pins.Base.Digest, b.baseHash(arch))
	case Cursor:
		arch = cursorArch
		base = fmt.Sprintf("cursor base %s %s", tg.pins.Cursor.Digest, cursorPlatform)
	}
	driver, err := b.driverFor(arch)
	if err != nil {
		return recipe{}, err
	}
	sh := recipeHash(sys, nil, base)
	h := recipeHash(drv, driver, "system "+sh)
	return recipe{
		key:       key,
		arch:      arch,
		driverBin: driver,
		system:    layer{files: sys, hash: sh, ref: systemRepo + ":" + string(key) + "-" + sh[:12]},
		driver:    layer{files: drv, hash: h, ref: desktopRepo + ":" + string(key) + "-" + h[:12]},
		hash:      h,
		ref:       desktopRepo + ":" + string(key) + "-" + h[:12],
	}, nil
}

// result describes r's image img.
func (r recipe) result(img engine.Image, reused bool) Result {
	return Result{Key: r.key, Ref: r.ref, ImageID: img.ID, RecipeHash: r.hash, Arch: r.arch, Reused: reused, SystemRef: r.system.ref}
}

// layerFiles reads the files under root in fsys, keyed by their path below root joined to
// prefix. A layer needs a Containerfile.
func layerFiles(fsys fs.FS, root, prefix string) (map[string][]byte, error) {
	files := map[string][]byte{}
	if err := addFiles(files, fsys, root, prefix); err != nil {
		return nil, err
	}
	if _, ok := files["Containerfile"]; !ok {
		return nil, fmt.Errorf("%s has no Containerfile", root)
	}
	return files, nil
}

// addFiles adds the files under root to files, keyed by path below root joined to prefix.
func addFiles(files map[string][]byte, fsys fs.FS, root, prefix string) error {
	return fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files[path.Join(prefix, strings.TrimPrefix(p, root+"/"))] = data
		return nil
	})
}

// recipeHash is the content hash of a build: every file (path and bytes, in path order), the
// driver binary and the base identity. Equal inputs give equal hashes; any change, a new one.
func recipeHash(files map[string][]byte, driver []byte, base string) string {
	h := sha256.New()
	field := func(name string, data []byte) {
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
		h.Write([]byte{'\n'})
	}
	field("version", []byte(hashVersion))
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		field("file:"+n, files[n])
	}
	field("driver", driver)
	field("base", []byte(base))
	return hex.EncodeToString(h.Sum(nil))
}

// baseHash identifies the offline base recipe (the debootstrap script) for arch. The mirror is
// left out on purpose: any mirror serves the same suite.
func (b *Builder) baseHash(arch string) string {
	script, err := recipes.ReadFile("base/debootstrap.sh")
	if err != nil {
		panic("images: base/debootstrap.sh is not embedded: " + err.Error()) // build-time invariant
	}
	return recipeHash(map[string][]byte{"debootstrap.sh": script}, nil, "bookworm minbase "+debianArch[arch])
}

// steps counts the Containerfile instructions that do work: RUN, and COPY/ADD. They weigh
// the build's progress and give the M of "build N/M" until the engine prints its numbering.
func (l layer) steps() (runs, copies int) {
	return countSteps(l.files["Containerfile"])
}

var instrRe = regexp.MustCompile(`(?i)^\s*(RUN|COPY|ADD)\s`)

func countSteps(containerfile []byte) (runs, copies int) {
	sc := bufio.NewScanner(bytes.NewReader(containerfile))
	continued := false
	for sc.Scan() {
		line := sc.Text()
		if m := instrRe.FindStringSubmatch(line); m != nil && !continued {
			if strings.EqualFold(m[1], "RUN") {
				runs++
			} else {
				copies++
			}
		}
		trimmed := strings.TrimSpace(line)
		continued = strings.HasSuffix(trimmed, `\`) && !strings.HasPrefix(trimmed, "#")
	}
	return runs, copies
}

// writeContext materialises the layer's build context in dir, with the driver binary when
// driver is not nil.
func (l layer) writeContext(dir string, driver []byte) error {
	for name, data := range l.files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fault.Unavailable("write build context: %v", err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			return fault.Unavailable("write build context: %v", err)
		}
	}
	if driver != nil {
		if err := os.WriteFile(filepath.Join(dir, driverName), driver, 0o755); err != nil {
			return fault.Unavailable("write build context: %v", err)
		}
	}
	return nil
}
