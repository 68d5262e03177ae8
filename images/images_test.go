package images

import (
	"bytes"
	"cmp"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/guest/guesttest"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Key
		ok       bool
	}{
		{"standard", "standard", Standard, true},
		{"cursor", "cursor", Cursor, true},
		{"empty", "", "", false},
		{"case matters", "Standard", "", false},
		{"raw image ref refused", "docker.io/library/debian:bookworm", "", false},
		{"base is not a desktop", "base", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKey(tc.in)
			if tc.ok {
				if err != nil || got != tc.want {
					t.Fatalf("ParseKey(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, fault.ErrInvalid) {
				t.Fatalf("ParseKey(%q) error = %v; want fault.ErrInvalid", tc.in, err)
			}
		})
	}
}

func TestRecipeHash(t *testing.T) {
	fsys := fstest.MapFS{
		"standard/Containerfile":  {Data: []byte("FROM x\nRUN true\n")},
		"desktop/setup.sh":        {Data: []byte("echo setup\n")},
		"desktop/rootfs/etc/a.rc": {Data: []byte("a=1\n")},
	}
	hashOf := func(t *testing.T, fsys fs.FS, driver, base string) string {
		t.Helper()
		files, err := layerFiles(fsys, "standard", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := addFiles(files, fsys, "desktop", "desktop"); err != nil {
			t.Fatal(err)
		}
		return recipeHash(files, []byte(driver), base)
	}
	ref := hashOf(t, fsys, "driver-1", "base-1")
	with := func(path, data string) fs.FS {
		m := fstest.MapFS{}
		for k, v := range fsys {
			m[k] = v
		}
		m[path] = &fstest.MapFile{Data: []byte(data)}
		return m
	}
	for _, tc := range []struct {
		name   string
		fsys   fs.FS
		driver string
		base   string
		same   bool
	}{
		{"same input", fsys, "driver-1", "base-1", true},
		{"containerfile changed", with("standard/Containerfile", "FROM x\nRUN false\n"), "driver-1", "base-1", false},
		{"shared layer changed", with("desktop/setup.sh", "echo other\n"), "driver-1", "base-1", false},
		{"file added", with("desktop/rootfs/etc/b.rc", ""), "driver-1", "base-1", false},
		{"driver changed", fsys, "driver-2", "base-1", false},
		{"base changed", fsys, "driver-1", "base-2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hashOf(t, tc.fsys, tc.driver, tc.base)
			if (got == ref) != tc.same {
				t.Fatalf("hash %s vs %s: same=%v, want same=%v", got[:12], ref[:12], got == ref, tc.same)
			}
		})
	}
	// Moving bytes between a file name and its content must not collide.
	a := recipeHash(map[string][]byte{"ab": []byte("c")}, nil, "")
	b := recipeHash(map[string][]byte{"a": []byte("bc")}, nil, "")
	if a == b {
		t.Fatal("hash is ambiguous between names and contents")
	}
}

// fakeDriver is an ELF header of a static executable for arch followed by payload: enough for
// the Builder's checks, different payloads giving different drivers.
func fakeDriver(arch, payload string) []byte {
	return fakeELF(elfMachine[arch], false, payload)
}

func fakeELF(m elf.Machine, interp bool, payload string) []byte {
	var b bytes.Buffer
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	phnum, phoff := uint16(0), uint64(0)
	if interp {
		phnum, phoff = 1, 64
	}
	w(uint16(elf.ET_EXEC))
	w(uint16(m))
	w(uint32(1))
	w(uint64(0x400000))
	w(phoff)
	w(uint64(0))
	w(uint32(0))
	for _, v := range []uint16{64, 56, phnum, 64, 0, 0} {
		w(v)
	}
	if interp {
		w(uint32(elf.PT_INTERP))
		w(uint32(4))
		for range 6 {
			w(uint64(1))
		}
	}
	b.WriteString(payload)
	return b.Bytes()
}

// bothDrivers gives a builder fake drivers for both architectures.
func bothDrivers(payload string) map[string][]byte {
	return map[string][]byte{"amd64": fakeDriver("amd64", payload), "arm64": fakeDriver("arm64", payload)}
}

func staticPins(p Pins) func() (Pins, error) { return func() (Pins, error) { return p, nil } }

func TestBuilderTags(t *testing.T) {
	newB := func(driver string, mod func(*Config)) *Builder {
		cfg := Config{Engine: &fakeEngine{}, Drivers: bothDrivers(driver), Pins: staticPins(DefaultPins())}
		if mod != nil {
			mod(&cfg)
		}
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rec := func(b *Builder, k Key) recipe {
		t.Helper()
		tg, err := b.target(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.recipe(k, tg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	sysRef := func(b *Builder, k Key) string {
		r := rec(b, k)
		if !strings.HasPrefix(r.system.ref, "localhost/cubicle-system:"+string(k)+"-") || r.driver.ref != r.ref {
			t.Fatalf("layers %q, %q of %q", r.system.ref, r.driver.ref, r.ref)
		}
		return r.system.ref
	}
	ref := func(b *Builder, k Key) string {
		r := rec(b, k)
		if !strings.HasPrefix(r.ref, "localhost/cubicle-desktop:"+string(k)+"-") || len(r.ref) != len("localhost/cubicle-desktop:"+string(k)+"-")+12 {
			t.Fatalf("ref %q is not localhost/cubicle-desktop:%s-<hash12>", r.ref, k)
		}
		return r.ref
	}
	a, a2, other := newB("one", nil), newB("one", nil), newB("two", nil)
	if ref(a, Standard) != ref(a2, Standard) || ref(a, Cursor) != ref(a2, Cursor) {
		t.Fatal("same recipe and driver gave different tags")
	}
	if ref(a, Standard) == ref(other, Standard) || ref(a, Cursor) == ref(other, Cursor) {
		t.Fatal("a different driver kept the tag")
	}
	if sysRef(a, Standard) != sysRef(other, Standard) || sysRef(a, Cursor) != sysRef(other, Cursor) {
		t.Fatal("a different driver changed the system layer's tag")
	}
	mirror := newB("one", func(c *Config) { c.Mirror = "http://mirror.example/debian" })
	if ref(a, Standard) != ref(mirror, Standard) {
		t.Fatal("the Debian mirror changed the standard tag; any mirror serves the same suite")
	}
	withPins := func(mod func(*Pins)) *Builder {
		p := DefaultPins()
		mod(&p)
		return newB("one", func(c *Config) { c.Pins = staticPins(p) })
	}
	cursorDigest := withPins(func(p *Pins) { p.Cursor.Digest = "sha256:" + strings.Repeat("ab", 32) })
	if ref(a, Cursor) == ref(cursorDigest, Cursor) || sysRef(a, Cursor) == sysRef(cursorDigest, Cursor) {
		t.Fatal("a different cursor digest kept the cursor tag")
	}
	if ref(a, Standard) != ref(cursorDigest, Standard) {
		t.Fatal("the cursor digest changed the standard tag")
	}
	baseDigest := withPins(func(p *Pins) { p.Base.Digest = "sha256:" + strings.Repeat("cd", 32) })
	if ref(a, Standard) == ref(baseDigest, Standard) || sysRef(a, Standard) == sysRef(baseDigest, Standard) {
		t.Fatal("a different base digest kept the standard tag")
	}
	if ref(a, Cursor) != ref(baseDigest, Cursor) {
		t.Fatal("the standard base digest changed the cursor tag")
	}
	// The digest names the content: a mirror serving it gives the same image.
	mirrored := withPins(func(p *Pins) {
		p.Base.Image = "registry.example:5000/mirror/debian"
		p.Cursor.Image = "registry.example:5000/mirror/universal"
	})
	if ref(a, Standard) != ref(mirrored, Standard) || ref(a, Cursor) != ref(mirrored, Cursor) {
		t.Fatal("a mirror serving the same digests changed the tags")
	}
	// The source of the base is how, not what: the tag stays.
	for _, src := range []BaseSource{BasePull, BaseDebootstrap} {
		if ref(a, Standard) != ref(newB("one", func(c *Config) { c.BaseSource = src }), Standard) {
			t.Fatalf("base source %s changed the standard tag", src)
		}
	}
	// Per architecture: the standard image differs (system layer and driver), the cursor image
	// is amd64 on every engine.
	arm := newB("one", func(c *Config) { c.Arch = "arm64" })
	if sysRef(a, Standard) == sysRef(arm, Standard) || ref(a, Standard) == ref(arm, Standard) {
		t.Fatal("the arm64 standard image has the amd64 tags")
	}
	if ref(a, Cursor) != ref(arm, Cursor) {
		t.Fatal("the cursor image on an arm64 engine is not the amd64 image")
	}
	if r := rec(arm, Standard); r.arch != "arm64" || !bytes.Equal(r.driverBin, fakeDriver("arm64", "one")) {
		t.Fatalf("arm64 standard recipe: arch %q, driver for the wrong architecture", r.arch)
	}
	if r := rec(arm, Cursor); r.arch != "amd64" || !bytes.Equal(r.driverBin, fakeDriver("amd64", "one")) {
		t.Fatalf("cursor recipe on arm64: arch %q, driver for the wrong architecture", r.arch)
	}
}

func TestParseStep(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		n, m       int
		ok         bool
	}{
		{"podman", "STEP 3/11: RUN apt-get update", 3, 11, true},
		{"podman first", "STEP 1/11: FROM localhost/cubicle-base:bookworm-0123", 1, 11, true},
		{"docker classic", "Step 4/9 : COPY desktop/ /opt/cubicle/desktop/", 4, 9, true},
		{"buildkit", "#7 [3/5] RUN sh /opt/cubicle/desktop/setup.sh", 3, 5, true},
		{"buildkit stage", "#9 [stage-1 2/4] COPY a b", 2, 4, true},
		{"apt output", "Setting up libx11-6:amd64 (2:1.8.4-2) ...", 0, 0, false},
		{"layer id", "--> 305016daac6", 0, 0, false},
		{"out of range", "STEP 12/11: CMD []", 0, 0, false},
		{"zero", "STEP 0/0: nothing", 0, 0, false},
		{"inside text", "echo STEP 1/2: not at start", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, m, ok := parseStep(tc.line)
			if n != tc.n || m != tc.m || ok != tc.ok {
				t.Fatalf("parseStep(%q) = %d, %d, %v; want %d, %d, %v", tc.line, n, m, ok, tc.n, tc.m, tc.ok)
			}
		})
	}
}

func TestCountSteps(t *testing.T) {
	for _, tc := range []struct {
		name         string
		file         string
		runs, copies int
	}{
		{"run copy add", "FROM x\nRUN a\nCOPY b c\nADD d e\nENV X=1\n", 1, 2},
		{"continuation lines are not steps", "FROM x\nRUN a \\\n  && run b \\\n  copy c\nCOPY x y\n", 1, 1},
		{"lower case", "from x\nrun a\n", 1, 0},
		{"comments", "# RUN not this\nFROM x\n", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if runs, copies := countSteps([]byte(tc.file)); runs != tc.runs || copies != tc.copies {
				t.Fatalf("countSteps = %d RUN, %d COPY; want %d, %d", runs, copies, tc.runs, tc.copies)
			}
		})
	}
	for dir, want := range map[string][2]int{"standard": {2, 1}, "cursor": {2, 1}, "driver": {0, 1}} {
		files, err := layerFiles(recipes, dir, "")
		if err != nil {
			t.Fatal(err)
		}
		if runs, copies := countSteps(files["Containerfile"]); runs != want[0] || copies != want[1] {
			t.Errorf("%s/Containerfile: %d RUN, %d COPY; want %v", dir, runs, copies, want)
		}
	}
}

func TestBuildProgress(t *testing.T) {
	var got []Progress
	rep := newReporter(func(p Progress) { got = append(got, p) })
	// One RUN and one COPY in the file; the engine adds a LABEL step: 4 steps.
	w := rep.buildWriter("build", 1, 1, 20, 99)
	io.WriteString(w, "STEP 1/4: FROM base\nSTEP 2/4: RUN apt-get")
	io.WriteString(w, " install\nGet:1 http://deb.debian.org x\r\nSTEP 3/4: COPY a b\n")
	io.WriteString(w, "STEP 4/4: LABEL x=y\nCOMMIT localhost/x")
	w.Flush()
	want := []struct {
		step, line string
	}{
		{"build 1/4", "STEP 1/4: FROM base"},
		{"build 2/4", "STEP 2/4: RUN apt-get install"},
		{"build 2/4", "Get:1 http://deb.debian.org x"},
		{"build 3/4", "STEP 3/4: COPY a b"},
		{"build 4/4", "STEP 4/4: LABEL x=y"},
		{"build 4/4", "COMMIT localhost/x"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d reports %+v, want %d", len(got), got, len(want))
	}
	last := -1.0
	for i, w := range want {
		if got[i].Step != w.step || got[i].Line != w.line {
			t.Errorf("report %d = %q %q, want %q %q", i, got[i].Step, got[i].Line, w.step, w.line)
		}
		if got[i].Percent < last || got[i].Percent < 20 || got[i].Percent > 99 {
			t.Errorf("report %d percent %.1f out of order or range (previous %.1f)", i, got[i].Percent, last)
		}
		last = got[i].Percent
	}
	// Weights: FROM and LABEL 0.25 each, RUN 20, COPY 2 → the RUN spans most of the bar.
	total := 0.25 + runWeight + copyWeight + 0.25
	span := 79.0
	for i, wantPct := range map[int]float64{0: 20, 1: 20 + span*0.25/total, 3: 20 + span*(0.25+runWeight)/total, 4: 20 + span*(0.25+runWeight+copyWeight)/total} {
		if math.Abs(got[i].Percent-wantPct) > 1e-9 {
			t.Errorf("report %d (%s) at %.3f%%, want %.3f%%", i, got[i].Line, got[i].Percent, wantPct)
		}
	}
	if !(got[2].Percent > got[1].Percent && got[2].Percent < got[3].Percent) {
		t.Errorf("output inside the RUN step does not creep forward: %.3f → %.3f → %.3f", got[1].Percent, got[2].Percent, got[3].Percent)
	}
}

func TestNewValidation(t *testing.T) {
	amd := fakeDriver("amd64", "d")
	for _, tc := range []struct {
		name  string
		cfg   Config
		class error
		msg   string
	}{
		{"no engine", Config{Driver: amd}, fault.ErrInvalid, "Engine is required"},
		{"missing driver file", Config{Engine: &fakeEngine{}, DriverPath: "/nonexistent/cubicle-guest"}, fault.ErrUnavailable, "driver not found"},
		{"driver not ELF", Config{Engine: &fakeEngine{}, Driver: []byte("#!/bin/sh\n")}, fault.ErrInvalid, "not an ELF executable"},
		{"driver dynamic", Config{Engine: &fakeEngine{}, Driver: fakeELF(elf.EM_X86_64, true, "")}, fault.ErrInvalid, "CGO_ENABLED=0"},
		{"driver for another machine", Config{Engine: &fakeEngine{}, Driver: fakeELF(elf.EM_RISCV, false, "")}, fault.ErrInvalid, "not one of linux/amd64"},
		{"driver under the wrong arch", Config{Engine: &fakeEngine{}, Drivers: map[string][]byte{"arm64": amd}}, fault.ErrInvalid, "built for linux/amd64, not linux/arm64"},
		{"bad base source", Config{Engine: &fakeEngine{}, Driver: amd, BaseSource: "ftp"}, fault.ErrInvalid, "use \"auto\", \"pull\" or \"debootstrap\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("New error = %v, want class %v with %q", err, tc.class, tc.msg)
			}
		})
	}
	t.Run("base source from the environment", func(t *testing.T) {
		t.Setenv(EnvBaseSource, "nonsense")
		if _, err := New(Config{Engine: &fakeEngine{}, Driver: amd}); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), EnvBaseSource) {
			t.Fatalf("New with %s=nonsense: %v", EnvBaseSource, err)
		}
		t.Setenv(EnvBaseSource, "PULL")
		b, err := New(Config{Engine: &fakeEngine{}, Driver: amd})
		if err != nil || b.cfg.BaseSource != BasePull {
			t.Fatalf("New with %s=PULL: source %q, %v", EnvBaseSource, b.cfg.BaseSource, err)
		}
	})
	t.Run("embedded drivers", func(t *testing.T) {
		b, err := New(Config{Engine: &fakeEngine{}})
		var embedded []string
		for _, arch := range archs {
			if _, statErr := fs.Stat(bin, "bin/"+embeddedDriver(arch)); statErr == nil {
				embedded = append(embedded, arch)
			}
		}
		if len(embedded) == 0 {
			if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "driver not built: run scripts/build.sh") {
				t.Fatalf("without images/bin/%s-<arch>: error %v, want \"driver not built: run scripts/build.sh\"", driverName, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("with the embedded drivers %v: %v", embedded, err)
		}
		if got := sortedKeys(b.drivers); !slices.Equal(got, embedded) {
			t.Fatalf("drivers %v, embedded %v", got, embedded)
		}
	})
}

// fakeEngine is an in-memory Engine for the Builder's decision logic; the real paths are
// covered by the Podman and Docker integration tests.
type fakeEngine struct {
	mu       sync.Mutex
	arch     string                  // what Info reports ("" = amd64)
	images   map[string]engine.Image // ref → image
	pullErr  error
	pullArch string // the arch of pulled images ("" = the platform asked for)
	builds   []engine.BuildSpec
	pulls    []string
	pullOpts []engine.PullOptions
	platf    []string // the platform of each pull
	imports  int
	// driverCtx holds the driver binary of every build context that had one.
	driverCtx [][]byte
}

func (f *fakeEngine) Info(context.Context) (engine.Info, error) {
	return engine.Info{Kind: "fake", Arch: cmp.Or(f.arch, "amd64"), OS: "linux"}, nil
}

func (f *fakeEngine) BuildImage(_ context.Context, spec engine.BuildSpec) (engine.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builds = append(f.builds, spec)
	if d, err := os.ReadFile(filepath.Join(spec.ContextDir, driverName)); err == nil {
		f.driverCtx = append(f.driverCtx, d)
	}
	io.WriteString(spec.Progress, "STEP 1/2: FROM x\nSTEP 2/2: RUN y\n")
	img := engine.Image{ID: "built-" + spec.Tag, Names: []string{spec.Tag}, Labels: spec.Labels}
	f.put(spec.Tag, img)
	return img, nil
}

func (f *fakeEngine) ImportImage(_ context.Context, r io.Reader, ref string, labels map[string]string) (engine.Image, error) {
	io.Copy(io.Discard, r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.imports++
	img := engine.Image{ID: "imported-" + ref, Labels: labels}
	f.put(ref, img)
	return img, nil
}

func (f *fakeEngine) PullImage(_ context.Context, ref, platform string, opts engine.PullOptions) (engine.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulls = append(f.pulls, ref)
	f.pullOpts = append(f.pullOpts, opts)
	f.platf = append(f.platf, platform)
	if f.pullErr != nil {
		return engine.Image{}, f.pullErr
	}
	img := engine.Image{ID: "pulled-" + ref, Arch: cmp.Or(f.pullArch, strings.TrimPrefix(platform, "linux/"))}
	f.put(ref, img)
	return img, nil
}

func (f *fakeEngine) InspectImage(_ context.Context, ref string) (engine.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if img, ok := f.images[ref]; ok {
		return img, nil
	}
	return engine.Image{}, fault.NotFound("no image %s", ref)
}

func (f *fakeEngine) RemoveImage(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.images, ref)
	return nil
}

func fakeImage(id string) engine.Image { return engine.Image{ID: id} }

func (f *fakeEngine) put(ref string, img engine.Image) {
	if f.images == nil {
		f.images = map[string]engine.Image{}
	}
	f.images[ref] = img
}

func (f *fakeEngine) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.images)
}

// testHost is a Linux host of arch that can run debootstrap.
func testHost(arch string) hostInfo {
	return hostInfo{goos: "linux", goarch: arch, root: true, haveDebootstrap: func() bool { return true },
		emulates: func(string) bool { return false }}
}

func TestEnsureDecisions(t *testing.T) {
	ctx := context.Background()
	pinned := func(base, cursor string) Pins {
		p := DefaultPins()
		if base != "" {
			p.Base = Pin{Image: base, Digest: "sha256:" + strings.Repeat("2", 64)}
		}
		if cursor != "" {
			p.Cursor = Pin{Image: cursor, Digest: "sha256:" + strings.Repeat("1", 64)}
		}
		return p
	}
	newB := func(t *testing.T, fe *fakeEngine, mod func(*Config)) *Builder {
		t.Helper()
		cfg := Config{Engine: fe, Drivers: bothDrivers("d"), LockPath: t.TempDir() + "/lock", Pins: staticPins(DefaultPins())}
		if mod != nil {
			mod(&cfg)
		}
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b.host = testHost("amd64")
		return b
	}
	t.Run("unknown key", func(t *testing.T) {
		b := newB(t, &fakeEngine{}, nil)
		if _, err := b.Ensure(ctx, "desktop", nil); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("Ensure(desktop) = %v, want fault.ErrInvalid", err)
		}
	})
	t.Run("invalid pins refuse before anything", func(t *testing.T) {
		fe := &fakeEngine{}
		b := newB(t, fe, func(c *Config) {
			c.Pins = func() (Pins, error) { return Pins{}, fault.Invalid("CUBICLE_CURSOR_DIGEST: bad") }
		})
		if _, err := b.Ensure(ctx, Cursor, nil); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "CUBICLE_CURSOR_DIGEST") {
			t.Fatalf("Ensure with bad pins = %v", err)
		}
		if len(fe.pulls)+len(fe.builds) != 0 {
			t.Fatal("work done with invalid pins")
		}
	})
	t.Run("unsupported engine architecture", func(t *testing.T) {
		b := newB(t, &fakeEngine{arch: "s390x"}, nil)
		if _, err := b.Ensure(ctx, Standard, nil); !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "linux/amd64 and linux/arm64") {
			t.Fatalf("Ensure on s390x = %v", err)
		}
	})
	t.Run("cursor builds on the pulled digest then reuses", func(t *testing.T) {
		fe := &fakeEngine{}
		b := newB(t, fe, func(c *Config) { c.Pins = staticPins(pinned("", "127.0.0.1:5000/base:sand-box-latest")) })
		var steps []string
		res, err := b.Ensure(ctx, Cursor, func(p Progress) { steps = append(steps, p.Step) })
		if err != nil || res.Reused || res.Arch != "amd64" {
			t.Fatalf("first Ensure = %+v, %v", res, err)
		}
		// By digest without the tag, plain HTTP for a loopback registry, amd64.
		if len(fe.pulls) != 1 || fe.pulls[0] != "127.0.0.1:5000/base@sha256:"+strings.Repeat("1", 64) || !fe.pullOpts[0].Insecure || fe.platf[0] != "linux/amd64" {
			t.Fatalf("pulls = %v %+v %v, want the base by digest, insecure, linux/amd64", fe.pulls, fe.pullOpts, fe.platf)
		}
		if len(fe.builds) != 2 {
			t.Fatalf("%d builds, want the system and the driver layer", len(fe.builds))
		}
		sys, drv := fe.builds[0], fe.builds[1]
		if sys.BuildArgs["BASE"] != "pulled-"+fe.pulls[0] || sys.Platform != "" || !strings.HasPrefix(sys.Tag, "localhost/cubicle-system:cursor-") ||
			sys.Labels[engine.LabelImageKey] != "cursor/system" || sys.Labels[LabelBase] != fe.pulls[0] {
			t.Fatalf("system layer spec %+v", sys)
		}
		if drv.BuildArgs["BASE"] != "built-"+sys.Tag || drv.Platform != "" || drv.Tag != res.Ref ||
			drv.Labels[engine.LabelImageKey] != "cursor" || drv.Labels[engine.LabelRecipe] != res.RecipeHash {
			t.Fatalf("driver layer spec %+v does not match result %+v", drv, res)
		}
		if steps[0] != "pull" || steps[len(steps)-1] != "done" {
			t.Fatalf("progress steps %v", steps)
		}
		again, err := b.Ensure(ctx, Cursor, nil)
		if err != nil || !again.Reused || again.Ref != res.Ref || len(fe.builds) != 2 || len(fe.pulls) != 1 {
			t.Fatalf("second Ensure = %+v, %v (builds %d, pulls %d); want reuse", again, err, len(fe.builds), len(fe.pulls))
		}
	})
	t.Run("a remote registry is never insecure", func(t *testing.T) {
		fe := &fakeEngine{}
		b := newB(t, fe, func(c *Config) { c.Pins = staticPins(pinned("", "registry.example.com/mirror/universal")) })
		if _, err := b.Ensure(ctx, Cursor, nil); err != nil {
			t.Fatal(err)
		}
		if fe.pullOpts[0].Insecure {
			t.Fatal("a pull from registry.example.com was insecure")
		}
	})
	t.Run("cursor base unpullable changes nothing", func(t *testing.T) {
		fe := &fakeEngine{pullErr: fault.Unavailable("manifest unknown")}
		b := newB(t, fe, nil)
		_, err := b.Ensure(ctx, Cursor, nil)
		want := "public.ecr.aws/k0i0n2g5/cursorenvironments/universal@" + DefaultCursorDigest
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "configure a registry or mirror") || !strings.Contains(err.Error(), EnvCursorDigest) {
			t.Fatalf("error %v: want fault.ErrUnavailable naming %s and what to do", err, want)
		}
		if fe.count() != 0 || len(fe.builds) != 0 {
			t.Fatalf("images %d, builds %d after a failed pull; want none", fe.count(), len(fe.builds))
		}
	})
	t.Run("cursor on arm64 without emulation", func(t *testing.T) {
		fe := &fakeEngine{arch: "arm64"}
		b := newB(t, fe, func(c *Config) { c.Emulates = func(string) bool { return false } })
		_, err := b.Ensure(ctx, Cursor, nil)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "amd64 emulation") {
			t.Fatalf("error %v: want fault.ErrUnavailable about amd64 emulation", err)
		}
		if len(fe.pulls) != 0 {
			t.Fatal("pulled although the host cannot run the image")
		}
	})
	t.Run("cursor on arm64 with emulation is amd64", func(t *testing.T) {
		fe := &fakeEngine{arch: "arm64"}
		b := newB(t, fe, func(c *Config) { c.Emulates = func(a string) bool { return a == "amd64" } })
		res, err := b.Ensure(ctx, Cursor, nil)
		if err != nil || res.Arch != "amd64" {
			t.Fatalf("Ensure = %+v, %v", res, err)
		}
		if fe.platf[0] != "linux/amd64" || fe.builds[0].Platform != "linux/amd64" || fe.builds[1].Platform != "linux/amd64" {
			t.Fatalf("pull platform %q, build platforms %q %q: want linux/amd64 throughout", fe.platf[0], fe.builds[0].Platform, fe.builds[1].Platform)
		}
		if len(fe.driverCtx) != 1 || !bytes.Equal(fe.driverCtx[0], fakeDriver("amd64", "d")) {
			t.Fatal("the cursor image on an arm64 engine did not get the amd64 driver")
		}
	})
	t.Run("standard uses an existing offline base", func(t *testing.T) {
		fe := &fakeEngine{}
		b := newB(t, fe, nil)
		fe.put(b.offlineBaseRef("amd64"), engine.Image{ID: "base-id"})
		fe.pullErr = errors.New("no pull expected")
		res, err := b.Ensure(ctx, Standard, nil)
		if err != nil || res.Reused {
			t.Fatalf("Ensure = %+v, %v", res, err)
		}
		if len(fe.pulls) != 0 || fe.builds[0].BuildArgs["BASE"] != "base-id" || !strings.HasPrefix(fe.builds[0].Labels[LabelBase], "debootstrap ") {
			t.Fatalf("pulls %v, BASE %q, labels %v: want the existing base, no pull", fe.pulls, fe.builds[0].BuildArgs["BASE"], fe.builds[0].Labels)
		}
		// A new driver rebuilds only the driver layer, on the same system layer.
		b2 := newB(t, fe, func(c *Config) { c.Drivers = bothDrivers("d2") })
		res2, err := b2.Ensure(ctx, Standard, nil)
		if err != nil || res2.Reused || res2.Ref == res.Ref {
			t.Fatalf("Ensure with a new driver = %+v, %v", res2, err)
		}
		if len(fe.builds) != 3 || fe.builds[2].BuildArgs["BASE"] != "built-"+fe.builds[0].Tag {
			t.Fatalf("builds %d (last BASE %q): want one more, on the existing system layer", len(fe.builds), fe.builds[len(fe.builds)-1].BuildArgs["BASE"])
		}
		list, err := b.List(ctx)
		if err != nil || len(list) != 2 || !list[0].Prepared || list[0].Ref != res.Ref || list[1].Prepared {
			t.Fatalf("List = %+v, %v", list, err)
		}
	})
	t.Run("standard pulls the pinned base for the engine's architecture", func(t *testing.T) {
		for _, arch := range []string{"amd64", "arm64"} {
			t.Run(arch, func(t *testing.T) {
				fe := &fakeEngine{arch: arch}
				b := newB(t, fe, func(c *Config) { c.Pins = staticPins(pinned("localhost:5000/debian:bookworm-slim", "")) })
				res, err := b.Ensure(ctx, Standard, nil)
				if err != nil || res.Arch != arch {
					t.Fatalf("Ensure = %+v, %v", res, err)
				}
				want := "localhost:5000/debian@sha256:" + strings.Repeat("2", 64)
				if len(fe.pulls) != 1 || fe.pulls[0] != want || fe.platf[0] != "linux/"+arch || !fe.pullOpts[0].Insecure {
					t.Fatalf("pulls %v %v %+v, want %s for linux/%s", fe.pulls, fe.platf, fe.pullOpts, want, arch)
				}
				if fe.imports != 0 || fe.builds[0].BuildArgs["BASE"] != "pulled-"+want || fe.builds[0].Labels[LabelBase] != want {
					t.Fatalf("imports %d, system build %+v", fe.imports, fe.builds[0])
				}
				if fe.builds[0].Platform != "" || fe.builds[1].Platform != "" {
					t.Fatal("a native build was given a platform")
				}
				if len(fe.driverCtx) != 1 || !bytes.Equal(fe.driverCtx[0], fakeDriver(arch, "d")) {
					t.Fatalf("the %s image's driver layer got %d drivers, not the %s one", arch, len(fe.driverCtx), arch)
				}
			})
		}
	})
	t.Run("standard reuses a pinned base the engine has", func(t *testing.T) {
		fe := &fakeEngine{pullErr: errors.New("no pull expected")}
		b := newB(t, fe, nil)
		fe.put(DefaultPins().Base.Ref(), engine.Image{ID: "present", Arch: "amd64"})
		if _, err := b.Ensure(ctx, Standard, nil); err != nil {
			t.Fatal(err)
		}
		if len(fe.pulls) != 0 || fe.builds[0].BuildArgs["BASE"] != "present" {
			t.Fatalf("pulls %v, BASE %q", fe.pulls, fe.builds[0].BuildArgs["BASE"])
		}
	})
	t.Run("a pulled base of the wrong architecture is refused", func(t *testing.T) {
		fe := &fakeEngine{pullArch: "arm64"}
		b := newB(t, fe, func(c *Config) { c.BaseSource = BasePull })
		_, err := b.Ensure(ctx, Standard, nil)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "linux/arm64, and this engine needs linux/amd64") {
			t.Fatalf("Ensure = %v", err)
		}
		if len(fe.builds) != 0 {
			t.Fatal("built on a base of the wrong architecture")
		}
	})
	t.Run("unpullable base falls back to debootstrap", func(t *testing.T) {
		// The fallback itself runs debootstrap for real (integration tests); here the
		// decision: the reason it is impossible is reported with the pull error.
		for _, tc := range []struct {
			name string
			host hostInfo
			arch string
			src  BaseSource
			want string
		}{
			{"not linux", hostInfo{goos: "darwin", goarch: "arm64", root: true, haveDebootstrap: func() bool { return true }}, "arm64", BaseAuto, "only on Linux hosts"},
			{"no debootstrap", hostInfo{goos: "linux", goarch: "amd64", root: true, haveDebootstrap: func() bool { return false }}, "amd64", BaseAuto, "apt-get install debootstrap"},
			{"not root", hostInfo{goos: "linux", goarch: "amd64", haveDebootstrap: func() bool { return true }, emulates: func(string) bool { return false }}, "amd64", BaseAuto, "needs root"},
			{"foreign engine", testHost("amd64"), "arm64", BaseAuto, "this host is linux/amd64 without arm64 emulation for debootstrap"},
			{"turned off", testHost("amd64"), "amd64", BasePull, "turned off (CUBICLE_BASE_SOURCE=pull)"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				fe := &fakeEngine{arch: tc.arch, pullErr: fault.Unavailable("dial tcp: lookup registry-1.docker.io: no such host")}
				b := newB(t, fe, func(c *Config) { c.BaseSource = tc.src })
				b.host = tc.host
				// An offline base the engine has is not used when the host path is turned off.
				if tc.src == BasePull {
					fe.put(b.offlineBaseRef(tc.arch), engine.Image{ID: "offline"})
				}
				_, err := b.Ensure(ctx, Standard, nil)
				for _, want := range []string{tc.want, DefaultPins().Base.Ref(), "no such host", EnvBaseImage, "docker load"} {
					if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), want) {
						t.Errorf("error %v: want fault.ErrUnavailable containing %q", err, want)
					}
				}
				if len(fe.pulls) != 1 || len(fe.builds) != 0 || fe.imports != 0 {
					t.Fatalf("pulls %d, builds %d, imports %d: want one pull attempt and nothing else", len(fe.pulls), len(fe.builds), fe.imports)
				}
			})
		}
	})
	t.Run("debootstrap source never pulls", func(t *testing.T) {
		fe := &fakeEngine{}
		b := newB(t, fe, func(c *Config) { c.BaseSource = BaseDebootstrap })
		b.host.haveDebootstrap = func() bool { return false }
		_, err := b.Ensure(ctx, Standard, nil)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "apt-get install debootstrap") || !strings.Contains(err.Error(), "unset "+EnvBaseSource) {
			t.Fatalf("Ensure = %v", err)
		}
		if len(fe.pulls) != 0 {
			t.Fatalf("pulled %v with the debootstrap source", fe.pulls)
		}
		fe.put(b.offlineBaseRef("amd64"), engine.Image{ID: "offline"})
		if _, err := b.Ensure(ctx, Standard, nil); err != nil || fe.builds[0].BuildArgs["BASE"] != "offline" {
			t.Fatalf("with an offline base present: %v", err)
		}
	})
	t.Run("a standard image for a foreign architecture needs emulation", func(t *testing.T) {
		fe := &fakeEngine{}
		b := newB(t, fe, func(c *Config) { c.Arch = "arm64"; c.Emulates = func(string) bool { return false } })
		_, err := b.Ensure(ctx, Standard, nil)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "linux/arm64 cannot run on this linux/amd64 engine") {
			t.Fatalf("Ensure = %v", err)
		}
		if len(fe.pulls)+len(fe.builds) != 0 {
			t.Fatal("work done for an image the engine cannot run")
		}
	})
	t.Run("an emulated architecture is built with its platform", func(t *testing.T) {
		fe := &fakeEngine{}
		b := newB(t, fe, func(c *Config) { c.Arch = "arm64"; c.Emulates = func(a string) bool { return a == "arm64" } })
		res, err := b.Ensure(ctx, Standard, nil)
		if err != nil || res.Arch != "arm64" {
			t.Fatalf("Ensure = %+v, %v", res, err)
		}
		if fe.platf[0] != "linux/arm64" || fe.builds[0].Platform != "linux/arm64" || fe.builds[1].Platform != "linux/arm64" {
			t.Fatalf("pull %q, builds %q %q: want linux/arm64", fe.platf[0], fe.builds[0].Platform, fe.builds[1].Platform)
		}
		if !bytes.Equal(fe.driverCtx[0], fakeDriver("arm64", "d")) {
			t.Fatal("the arm64 image did not get the arm64 driver")
		}
	})
	t.Run("debootstrap for an emulated architecture", func(t *testing.T) {
		fe := &fakeEngine{arch: "arm64", pullErr: fault.Unavailable("offline")}
		b := newB(t, fe, nil)
		b.host.emulates = func(a string) bool { return a == "arm64" }
		if why := b.debootstrapUnavailable("arm64"); why != "" {
			t.Fatalf("debootstrap for arm64 on an amd64 host with arm64 emulation: %q", why)
		}
	})
	t.Run("no driver for the engine's architecture", func(t *testing.T) {
		fe := &fakeEngine{arch: "arm64"}
		b := newB(t, fe, func(c *Config) { c.Drivers = map[string][]byte{"amd64": fakeDriver("amd64", "d")} })
		_, err := b.Ensure(ctx, Standard, nil)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "no cubicle-guest driver for linux/arm64") || !strings.Contains(err.Error(), "GOARCH=arm64") {
			t.Fatalf("Ensure = %v", err)
		}
		if len(fe.pulls)+len(fe.builds) != 0 {
			t.Fatal("work done without a driver")
		}
	})
}

func TestHostLock(t *testing.T) {
	path := t.TempDir() + "/build.lock"
	unlock, err := lockHost(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A second holder (another process, or here another open file) waits, honouring ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	waited := false
	if _, err := lockHost(ctx, path, func() { waited = true }); !errors.Is(err, context.DeadlineExceeded) || !waited {
		t.Fatalf("second lock while held = %v (waited %v); want a wait ended by the deadline", err, waited)
	}
	done := make(chan error, 1)
	go func() {
		u, err := lockHost(context.Background(), path, nil)
		if err == nil {
			u()
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting holder did not get the lock after unlock")
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	guesttest.Cleanup()
	os.Exit(code)
}
