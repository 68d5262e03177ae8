package images

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// The Builder's decisions, with the fake engine of images_test.go: which base, which driver,
// which platform, and what is refused with which message (nothing built or pulled then).

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
