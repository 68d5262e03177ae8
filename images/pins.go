package images

import (
	"net"
	"regexp"
	"strings"

	"github.com/distribution/reference"

	"cubicle/backend/fault"
)

// Pin names a base image by repository and digest. Cubicle pulls repository@digest, never a
// tag, so a base cannot change under a prepared recipe; the digest is part of the recipe hash.
type Pin struct {
	// Image is the repository, fully qualified (docker.io/library/debian), optionally with a
	// tag that only documents where the digest was taken from (":bookworm-slim"); the tag never
	// selects the image.
	Image string `json:"image"`
	// Digest is the manifest or image index digest: "sha256:" and 64 lowercase hex digits.
	Digest string `json:"digest"`
}

// Pins are the bases of the two recipes.
type Pins struct {
	Base   Pin `json:"base"`   // the standard recipe's Debian base
	Cursor Pin `json:"cursor"` // the Cursor Universal environment
}

// The pinned defaults.
const (
	// DefaultBaseImage is the standard recipe's base: Debian bookworm, the official image's
	// slim variant.
	DefaultBaseImage = "docker.io/library/debian:bookworm-slim"
	// DefaultBaseDigest is the image index (multi-platform: amd64 and arm64 among others) of
	// DefaultBaseImage as published on Docker Hub in December 2025 — the digest `docker pull
	// debian:bookworm-slim` reported then, and the one Renovate pinned for the tag at the time
	// (e.g. cloudnative-pg/postgres-containers#374). No registry is reachable from Cubicle's
	// build machine, so it was not pulled there: a machine without a registry builds the same
	// Debian release offline with debootstrap. To move it forward, take the index digest of the
	// tag (`docker buildx imagetools inspect debian:bookworm-slim`, or
	// `skopeo inspect --raw docker://debian:bookworm-slim | sha256sum`).
	DefaultBaseDigest = "sha256:e899040a73d36e2b36fa33216943539d9957cba8172b858097c2cabcdb20a3e2"
	// DefaultCursorBase is the Cursor Universal environment image (its tag sand-box-latest
	// moves; Cubicle always uses it by digest).
	DefaultCursorBase = "public.ecr.aws/k0i0n2g5/cursorenvironments/universal:sand-box-latest"
	// DefaultCursorDigest is the linux/amd64 digest of DefaultCursorBase that another
	// desktop-agent app pins for this image (pulled with --platform linux/amd64); SPEC §1.2.
	DefaultCursorDigest = "sha256:289490f863d51a698c900839943311ba30e850efea0d6911edf62e7c07b50fe3"
)

// Environment variables that replace the defaults (settings saved by an admin beat them in
// turn, see backend/vm). An empty variable keeps the default.
const (
	EnvBaseImage    = "CUBICLE_BASE_IMAGE"
	EnvBaseDigest   = "CUBICLE_BASE_DIGEST"
	EnvCursorBase   = "CUBICLE_CURSOR_BASE"
	EnvCursorDigest = "CUBICLE_CURSOR_DIGEST"
	// EnvBaseSource chooses how the standard base is obtained: see BaseSource.
	EnvBaseSource = "CUBICLE_BASE_SOURCE"
)

// DefaultPins returns the built-in pins.
func DefaultPins() Pins {
	return Pins{
		Base:   Pin{Image: DefaultBaseImage, Digest: DefaultBaseDigest},
		Cursor: Pin{Image: DefaultCursorBase, Digest: DefaultCursorDigest},
	}
}

// PinsFromEnv returns the default pins with the environment's replacements (getenv nil =
// os.Getenv is the caller's choice; pass it). An invalid value is fault.ErrInvalid naming the
// variable.
func PinsFromEnv(getenv func(string) string) (Pins, error) {
	p := DefaultPins()
	var err error
	if p.Base, err = p.Base.Override(getenv(EnvBaseImage), getenv(EnvBaseDigest)); err != nil {
		return Pins{}, fault.Invalid("%s/%s: %v", EnvBaseImage, EnvBaseDigest, err)
	}
	if p.Cursor, err = p.Cursor.Override(getenv(EnvCursorBase), getenv(EnvCursorDigest)); err != nil {
		return Pins{}, fault.Invalid("%s/%s: %v", EnvCursorBase, EnvCursorDigest, err)
	}
	return p, nil
}

// Override returns p with image and digest replaced where they are not empty, validated as
// ParsePin validates.
func (p Pin) Override(image, digest string) (Pin, error) {
	if s := strings.TrimSpace(image); s != "" {
		p.Image = s
	}
	if s := strings.TrimSpace(digest); s != "" {
		p.Digest = s
	}
	return ParsePin(p.Image, p.Digest)
}

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParsePin validates a pin and normalises its image to the fully qualified form
// ("debian:bookworm-slim" becomes "docker.io/library/debian:bookworm-slim"), so that every
// engine resolves it to the same registry. Errors are fault.ErrInvalid and say what a valid
// value looks like.
func ParsePin(image, digest string) (Pin, error) {
	image, digest = strings.TrimSpace(image), strings.TrimSpace(digest)
	named, err := ParseImage(image)
	if err != nil {
		return Pin{}, err
	}
	if err := ValidDigest(digest); err != nil {
		return Pin{}, err
	}
	return Pin{Image: named, Digest: digest}, nil
}

// ParseImage validates an image reference without a digest (a repository, optionally with a
// tag) and returns it fully qualified.
func ParseImage(image string) (string, error) {
	if image == "" {
		return "", fault.Invalid("the image reference is empty: give a repository such as docker.io/library/debian:bookworm-slim")
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fault.Invalid("image %q is not a valid image reference (%v): write registry/repository[:tag], "+
			"lowercase, e.g. docker.io/library/debian:bookworm-slim", image, err)
	}
	if _, ok := named.(reference.Digested); ok {
		return "", fault.Invalid("image %q contains a digest: give the repository here (with an optional tag) and the "+
			"digest in its own field", image)
	}
	return named.String(), nil
}

// ValidDigest checks the form sha256:<64 lowercase hex digits>.
func ValidDigest(d string) error {
	if !digestRe.MatchString(d) {
		return fault.Invalid("digest %q is not of the form sha256:<64 lowercase hex digits> (the manifest digest a "+
			"registry reports, e.g. by `docker buildx imagetools inspect`)", d)
	}
	return nil
}

// Ref is what is pulled: the repository without its tag, at the digest
// ("docker.io/library/debian@sha256:…"). Engines disagree on references with both a tag and
// a digest, so the tag is left out.
func (p Pin) Ref() string {
	named, err := reference.ParseNormalizedNamed(p.Image)
	if err != nil {
		return p.Image + "@" + p.Digest // not reached for a parsed pin
	}
	return reference.TrimNamed(named).String() + "@" + p.Digest
}

// loopback reports whether the pin's registry is on this machine (localhost, 127.0.0.0/8,
// ::1). Engines talk plain HTTP to those (Docker does so by default); anything else needs TLS
// or the engine's own insecure-registry configuration.
func (p Pin) loopback() bool {
	named, err := reference.ParseNormalizedNamed(p.Image)
	if err != nil {
		return false
	}
	host := reference.Domain(named)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
