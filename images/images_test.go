package images

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
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

func TestBuilderTags(t *testing.T) {
	newB := func(driver string, mod func(*Config)) *Builder {
		cfg := Config{Engine: &fakeEngine{}, Driver: []byte(driver)}
		if mod != nil {
			mod(&cfg)
		}
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sysRef := func(b *Builder, k Key) string {
		r, err := b.recipe(k)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(r.system.ref, "localhost/cubicle-system:"+string(k)+"-") || r.driver.ref != r.ref {
			t.Fatalf("layers %q, %q of %q", r.system.ref, r.driver.ref, r.ref)
		}
		return r.system.ref
	}
	ref := func(b *Builder, k Key) string {
		r, err := b.recipe(k)
		if err != nil {
			t.Fatal(err)
		}
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
	digest := newB("one", func(c *Config) { c.CursorDigest = "sha256:" + strings.Repeat("ab", 32) })
	if ref(a, Cursor) == ref(digest, Cursor) || sysRef(a, Cursor) == sysRef(digest, Cursor) {
		t.Fatal("a different cursor digest kept the cursor tag")
	}
	if ref(a, Standard) != ref(digest, Standard) {
		t.Fatal("the cursor digest changed the standard tag")
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
	for _, tc := range []struct {
		name  string
		cfg   Config
		class error
	}{
		{"no engine", Config{Driver: []byte("d")}, fault.ErrInvalid},
		{"bad digest", Config{Engine: &fakeEngine{}, Driver: []byte("d"), CursorDigest: "sha256:abc"}, fault.ErrInvalid},
		{"digest in base", Config{Engine: &fakeEngine{}, Driver: []byte("d"), CursorBase: "r/x@sha256:" + strings.Repeat("a", 64)}, fault.ErrInvalid},
		{"missing driver file", Config{Engine: &fakeEngine{}, DriverPath: "/nonexistent/cubicle-guest"}, fault.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, tc.class) {
				t.Fatalf("New error = %v, want class %v", err, tc.class)
			}
		})
	}
	t.Run("defaults valid", func(t *testing.T) {
		if err := validDigest(DefaultCursorDigest); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("embedded driver", func(t *testing.T) {
		_, err := New(Config{Engine: &fakeEngine{}})
		if _, statErr := fs.Stat(bin, "bin/"+driverName); statErr != nil {
			if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "driver not built: run make build") {
				t.Fatalf("without images/bin/%s: error %v, want \"driver not built: run make build\"", driverName, err)
			}
		} else if err != nil {
			t.Fatalf("with the embedded driver: %v", err)
		}
	})
}

// fakeEngine is an in-memory Engine for the Builder's decision logic; the real paths are
// covered by the Podman integration tests.
type fakeEngine struct {
	mu      sync.Mutex
	images  map[string]engine.Image // ref → image
	pullErr error
	builds  []engine.BuildSpec
	pulls   []string
}

func (f *fakeEngine) BuildImage(_ context.Context, spec engine.BuildSpec) (engine.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builds = append(f.builds, spec)
	io.WriteString(spec.Progress, "STEP 1/2: FROM x\nSTEP 2/2: RUN y\n")
	img := engine.Image{ID: "built-" + spec.Tag, Names: []string{spec.Tag}, Labels: spec.Labels}
	f.put(spec.Tag, img)
	return img, nil
}

func (f *fakeEngine) ImportImage(_ context.Context, r io.Reader, ref string, labels map[string]string) (engine.Image, error) {
	io.Copy(io.Discard, r)
	f.mu.Lock()
	defer f.mu.Unlock()
	img := engine.Image{ID: "imported-" + ref, Labels: labels}
	f.put(ref, img)
	return img, nil
}

func (f *fakeEngine) PullImage(_ context.Context, ref, _ string, _ engine.PullOptions) (engine.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pulls = append(f.pulls, ref)
	if f.pullErr != nil {
		return engine.Image{}, f.pullErr
	}
	img := engine.Image{ID: "pulled-" + ref}
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

func TestEnsureDecisions(t *testing.T) {
	ctx := context.Background()
	t.Run("unknown key", func(t *testing.T) {
		b, _ := New(Config{Engine: &fakeEngine{}, Driver: []byte("d"), LockPath: t.TempDir() + "/lock"})
		if _, err := b.Ensure(ctx, "desktop", nil); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("Ensure(desktop) = %v, want fault.ErrInvalid", err)
		}
	})
	t.Run("cursor builds on the pulled digest then reuses", func(t *testing.T) {
		fe := &fakeEngine{}
		b, _ := New(Config{Engine: fe, Driver: []byte("d"), LockPath: t.TempDir() + "/lock", CursorBase: "127.0.0.1:5000/base", CursorDigest: "sha256:" + strings.Repeat("1", 64)})
		var steps []string
		res, err := b.Ensure(ctx, Cursor, func(p Progress) { steps = append(steps, p.Step) })
		if err != nil || res.Reused {
			t.Fatalf("first Ensure = %+v, %v", res, err)
		}
		if len(fe.pulls) != 1 || fe.pulls[0] != "127.0.0.1:5000/base@sha256:"+strings.Repeat("1", 64) {
			t.Fatalf("pulls = %v, want the base by digest", fe.pulls)
		}
		if len(fe.builds) != 2 {
			t.Fatalf("%d builds, want the system and the driver layer", len(fe.builds))
		}
		sys, drv := fe.builds[0], fe.builds[1]
		if sys.BuildArgs["BASE"] != "pulled-"+fe.pulls[0] || sys.Platform != "linux/amd64" || !strings.HasPrefix(sys.Tag, "localhost/cubicle-system:cursor-") ||
			sys.Labels[engine.LabelImageKey] != "cursor/system" {
			t.Fatalf("system layer spec %+v", sys)
		}
		if drv.BuildArgs["BASE"] != "built-"+sys.Tag || drv.Platform != "linux/amd64" || drv.Tag != res.Ref ||
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
	t.Run("cursor base unpullable changes nothing", func(t *testing.T) {
		fe := &fakeEngine{pullErr: fault.Unavailable("manifest unknown")}
		b, _ := New(Config{Engine: fe, Driver: []byte("d"), LockPath: t.TempDir() + "/lock"})
		_, err := b.Ensure(ctx, Cursor, nil)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), DefaultCursorBase+"@"+DefaultCursorDigest) ||
			!strings.Contains(err.Error(), "configure a registry or mirror") {
			t.Fatalf("error %v: want fault.ErrUnavailable naming the reference and what to do", err)
		}
		if fe.count() != 0 || len(fe.builds) != 0 {
			t.Fatalf("images %d, builds %d after a failed pull; want none", fe.count(), len(fe.builds))
		}
	})
	t.Run("cursor on arm64 without emulation", func(t *testing.T) {
		fe := &fakeEngine{}
		b, _ := New(Config{Engine: fe, Driver: []byte("d"), LockPath: t.TempDir() + "/lock", Arch: "arm64", EmulatesAMD64: func() bool { return false }})
		_, err := b.Ensure(ctx, Cursor, nil)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "amd64 emulation") {
			t.Fatalf("error %v: want fault.ErrUnavailable about amd64 emulation", err)
		}
		if len(fe.pulls) != 0 {
			t.Fatal("pulled although the host cannot run the image")
		}
	})
	t.Run("cursor on arm64 with emulation", func(t *testing.T) {
		b, _ := New(Config{Engine: &fakeEngine{}, Driver: []byte("d"), LockPath: t.TempDir() + "/lock", Arch: "arm64", EmulatesAMD64: func() bool { return true }})
		if _, err := b.Ensure(ctx, Cursor, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("standard uses an existing offline base", func(t *testing.T) {
		fe := &fakeEngine{}
		b, _ := New(Config{Engine: fe, Driver: []byte("d"), LockPath: t.TempDir() + "/lock"})
		baseRef := baseRepo + ":bookworm-" + b.baseHash()[:12]
		fe.put(baseRef, engine.Image{ID: "base-id"})
		res, err := b.Ensure(ctx, Standard, nil)
		if err != nil || res.Reused {
			t.Fatalf("Ensure = %+v, %v", res, err)
		}
		if len(fe.pulls) != 0 || fe.builds[0].BuildArgs["BASE"] != "base-id" {
			t.Fatalf("pulls %v, BASE %q: want the existing base, no pull", fe.pulls, fe.builds[0].BuildArgs["BASE"])
		}
		// A new driver rebuilds only the driver layer, on the same system layer.
		b2, _ := New(Config{Engine: fe, Driver: []byte("d2"), LockPath: t.TempDir() + "/lock"})
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
