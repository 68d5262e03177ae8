package images

import (
	"errors"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

func TestParsePin(t *testing.T) {
	d := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		name, image, digest string
		want                Pin    // when ok
		ref                 string // want.Ref()
		err                 string // in the error, when not ok
	}{
		{"official short name", "debian:bookworm-slim", d, Pin{"docker.io/library/debian:bookworm-slim", d}, "docker.io/library/debian@" + d, ""},
		{"fully qualified", "public.ecr.aws/k0i0n2g5/cursorenvironments/universal:sand-box-latest", d,
			Pin{"public.ecr.aws/k0i0n2g5/cursorenvironments/universal:sand-box-latest", d}, "public.ecr.aws/k0i0n2g5/cursorenvironments/universal@" + d, ""},
		{"loopback registry with port", "127.0.0.1:5000/mirror/debian", d, Pin{"127.0.0.1:5000/mirror/debian", d}, "127.0.0.1:5000/mirror/debian@" + d, ""},
		{"spaces trimmed", "  debian  ", " " + d + " ", Pin{"docker.io/library/debian", d}, "docker.io/library/debian@" + d, ""},
		{"empty image", "", d, Pin{}, "", "the image reference is empty"},
		{"upper case", "Debian:bookworm", d, Pin{}, "", "not a valid image reference"},
		{"url", "https://registry.example/debian", d, Pin{}, "", "not a valid image reference"},
		{"digest in image", "debian@" + d, d, Pin{}, "", "contains a digest"},
		{"tag and digest in image", "debian:bookworm@" + d, d, Pin{}, "", "contains a digest"},
		{"empty digest", "debian", "", Pin{}, "", "not of the form sha256:<64 lowercase hex digits>"},
		{"short digest", "debian", "sha256:abc", Pin{}, "", "not of the form"},
		{"upper-case digest", "debian", strings.ToUpper(d), Pin{}, "", "not of the form"},
		{"other algorithm", "debian", "sha512:" + strings.Repeat("0", 128), Pin{}, "", "not of the form"},
		{"digest without algorithm", "debian", strings.TrimPrefix(d, "sha256:"), Pin{}, "", "not of the form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePin(tc.image, tc.digest)
			if tc.err != "" {
				if !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParsePin(%q, %q) = %+v, %v; want fault.ErrInvalid with %q", tc.image, tc.digest, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || got.Ref() != tc.ref {
				t.Fatalf("ParsePin(%q, %q) = %+v (ref %s), %v; want %+v (ref %s)", tc.image, tc.digest, got, got.Ref(), err, tc.want, tc.ref)
			}
		})
	}
}

func TestDefaultPins(t *testing.T) {
	p := DefaultPins()
	for _, pin := range []Pin{p.Base, p.Cursor} {
		if got, err := ParsePin(pin.Image, pin.Digest); err != nil || got != pin {
			t.Fatalf("default pin %+v does not parse to itself: %+v, %v", pin, got, err)
		}
	}
	if p.Cursor.Ref() != "public.ecr.aws/k0i0n2g5/cursorenvironments/universal@sha256:289490f863d51a698c900839943311ba30e850efea0d6911edf62e7c07b50fe3" {
		t.Fatalf("cursor pin %s is not the one SPEC §1.2 names", p.Cursor.Ref())
	}
	if p.Base.Ref() != "docker.io/library/debian@"+DefaultBaseDigest {
		t.Fatalf("base pin %s", p.Base.Ref())
	}
	if p.Base.loopback() || p.Cursor.loopback() {
		t.Fatal("a public registry counted as loopback (plain HTTP)")
	}
}

func TestPinsFromEnv(t *testing.T) {
	d1 := "sha256:" + strings.Repeat("1", 64)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	t.Run("empty environment keeps the defaults", func(t *testing.T) {
		p, err := PinsFromEnv(env(nil))
		if err != nil || p != DefaultPins() {
			t.Fatalf("PinsFromEnv(empty) = %+v, %v", p, err)
		}
	})
	t.Run("each variable replaces one field", func(t *testing.T) {
		p, err := PinsFromEnv(env(map[string]string{EnvCursorBase: "mirror.example/universal", EnvBaseDigest: d1}))
		if err != nil {
			t.Fatal(err)
		}
		want := DefaultPins()
		want.Cursor.Image, want.Base.Digest = "mirror.example/universal", d1
		if p != want {
			t.Fatalf("PinsFromEnv = %+v, want %+v", p, want)
		}
	})
	for _, v := range []string{EnvBaseImage, EnvBaseDigest, EnvCursorBase, EnvCursorDigest} {
		t.Run("invalid "+v, func(t *testing.T) {
			_, err := PinsFromEnv(env(map[string]string{v: "Not A Reference@@"}))
			if !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), v) {
				t.Fatalf("PinsFromEnv(%s=bad) = %v; want fault.ErrInvalid naming %s", v, err, v)
			}
		})
	}
}

func TestPinLoopback(t *testing.T) {
	for image, want := range map[string]bool{
		"127.0.0.1:5000/x":              true,
		"127.1.2.3/x":                   true,
		"localhost:5000/x":              true,
		"localhost/x":                   true,
		"[::1]:5000/x":                  true,
		"registry.example:5000/x":       false,
		"10.0.0.1:5000/x":               false,
		"docker.io/library/debian":      false,
		"localhost.example.com:5000/x":  false,
		"127.0.0.1.nip.io:5000/library": false,
	} {
		if got := (Pin{Image: image}).loopback(); got != want {
			t.Errorf("loopback(%s) = %v, want %v", image, got, want)
		}
	}
}

func TestParseBaseSource(t *testing.T) {
	for in, want := range map[string]BaseSource{"": BaseAuto, "auto": BaseAuto, " Pull ": BasePull, "debootstrap": BaseDebootstrap} {
		if got, err := ParseBaseSource(in); err != nil || got != want {
			t.Errorf("ParseBaseSource(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseBaseSource("docker"); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("ParseBaseSource(docker) = %v, want fault.ErrInvalid", err)
	}
}
