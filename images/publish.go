package images

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// Pusher is what a Publisher needs from the engine that built an image (engine/podman and
// engine/docker satisfy it).
type Pusher interface {
	TagImage(ctx context.Context, id, ref string) error
	PushImage(ctx context.Context, ref string, opts engine.PullOptions) (digest string, err error)
}

// Ensurer makes sure an image of a key exists on this host (*Builder satisfies it).
type Ensurer interface {
	Ensure(ctx context.Context, key Key, progress func(Progress)) (Result, error)
}

// Publisher prepares images for an engine that pulls them from a registry (a Kubernetes
// cluster): it ensures the image with a local builder, tags it into Registry under the same
// tag (cubicle-desktop:<key>-<hash12>), pushes it, and returns it by digest
// (<Registry>/cubicle-desktop@sha256:…), the reference the cluster's nodes pull. The push is
// repeated on every Ensure: layers the registry has are not sent again, and a registry that
// lost the image gets it back.
type Publisher struct {
	Builder Ensurer
	Engine  Pusher
	// Registry is host[:port][/path] of the registry the cluster pulls from.
	Registry string
	// Insecure pushes over plain HTTP or without verifying TLS (a loopback or private
	// registry); the cluster's nodes must be told the same.
	Insecure bool
}

// registryRE is host[:port] followed by optional lower-case path components.
var registryRE = regexp.MustCompile(`^([a-zA-Z0-9.-]+(:[0-9]+)?)(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)

// CheckRegistry validates a registry given as host[:port][/path]; the host must be explicit
// (a dot, a port, or localhost), so that it is never read as a Docker Hub user.
func CheckRegistry(r string) error {
	if r == "" {
		return fault.Invalid("no image registry: give the registry the cluster pulls from (host[:port][/path])")
	}
	m := registryRE.FindStringSubmatch(r)
	if m == nil {
		return fault.Invalid("image registry %q: want host[:port][/path], e.g. registry.example.com/cubicle or 127.0.0.1:5000", r)
	}
	if host := m[1]; !strings.ContainsAny(host, ".:") && host != "localhost" {
		return fault.Invalid("image registry %q: the host must contain a dot or a port, or be localhost", r)
	}
	return nil
}

// Ensure builds (or reuses) key's image locally, pushes it to the registry and returns the
// reference by digest. Progress reports the build, then the push.
func (p *Publisher) Ensure(ctx context.Context, key Key, progress func(Progress)) (Result, error) {
	if err := CheckRegistry(p.Registry); err != nil {
		return Result{}, err
	}
	res, err := p.Builder.Ensure(ctx, key, func(pr Progress) {
		if progress != nil {
			if pr.Percent >= 0 {
				pr.Percent *= 0.8 // the push is the last fifth
			}
			progress(pr)
		}
	})
	if err != nil {
		return Result{}, err
	}
	_, tag, ok := strings.Cut(strings.TrimPrefix(res.Ref, desktopRepo), ":")
	if !ok || tag == "" {
		tag = string(key)
	}
	repo := strings.TrimSuffix(p.Registry, "/") + "/cubicle-desktop"
	ref := repo + ":" + tag
	report := func(line string, pct float64) {
		if progress != nil {
			progress(Progress{Step: "push", Line: line, Percent: pct})
		}
	}
	report("tagging "+res.Ref+" as "+ref, 80)
	if err := p.Engine.TagImage(ctx, res.ImageID, ref); err != nil {
		return Result{}, fmt.Errorf("images: publish %s: %w", key, err)
	}
	report("pushing "+ref, 82)
	digest, err := p.Engine.PushImage(ctx, ref, engine.PullOptions{Insecure: p.Insecure, Progress: lineFunc(func(l string) { report(l, -1) })})
	if err != nil {
		return Result{}, fmt.Errorf("images: publish %s: push to %s: %w", key, p.Registry, err)
	}
	res.Ref = repo + "@" + digest
	report("pushed "+res.Ref, 100)
	return res, nil
}

// lineFunc is an io.Writer that calls f with each complete line written.
type lineFunc func(string)

func (f lineFunc) Write(b []byte) (int, error) {
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			f(l)
		}
	}
	return len(b), nil
}
