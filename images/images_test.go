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
	for dir, want := range map[string][2]int{"standard": {3, 2}, "cursor": {2, 1}, "driver": {0, 1}} {
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
