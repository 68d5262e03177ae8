package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// BuildImage builds spec into an image tagged spec.Tag, writing the build output to
// spec.Progress as it arrives. A failing build step is fault.ErrUnavailable with the
// daemon's message.
func (c *Client) BuildImage(ctx context.Context, spec engine.BuildSpec) (engine.Image, error) {
	op := fmt.Sprintf("build image %q", spec.Tag)
	if (spec.ContextDir == "") == (spec.Context == nil) {
		return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Invalid("give exactly one of a context directory and a context stream"))
	}
	if spec.Tag == "" {
		return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Invalid("a tag is required"))
	}
	file := spec.Dockerfile
	if file == "" {
		file = "Containerfile"
	}
	if !filepath.IsLocal(file) {
		return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Invalid("containerfile %q must be inside the context", file))
	}
	body := spec.Context
	if body == nil {
		tr := engine.TarDir(spec.ContextDir)
		defer tr.Close()
		body = tr
	}
	args := make(map[string]*string, len(spec.BuildArgs))
	for k, v := range spec.BuildArgs {
		args[k] = &v
	}
	resp, err := c.api.ImageBuild(ctx, body, build.ImageBuildOptions{
		Tags:        []string{spec.Tag},
		Dockerfile:  filepath.ToSlash(file),
		Labels:      engine.ManagedLabels(spec.Labels),
		BuildArgs:   args,
		Platform:    spec.Platform,
		Remove:      true,
		ForceRemove: true,
	})
	if err != nil {
		return engine.Image{}, fail(op, err)
	}
	defer resp.Body.Close()
	var id string
	err = readStream(resp.Body, spec.Progress, func(raw json.RawMessage) {
		var a struct{ ID string }
		if json.Unmarshal(raw, &a) == nil && a.ID != "" {
			id = a.ID
		}
	})
	if err != nil {
		return engine.Image{}, engine.Wrap(op, 500, err)
	}
	if id == "" {
		id = spec.Tag
	}
	return c.InspectImage(ctx, id)
}

// ImportImage creates an image from a root file system tar, like `docker import`, tags it
// ref and labels it with labels plus engine.LabelManaged.
func (c *Client) ImportImage(ctx context.Context, rootfsTar io.Reader, ref string, labels map[string]string) (engine.Image, error) {
	op := fmt.Sprintf("import image %q", ref)
	changes, err := engine.LabelChanges(engine.ManagedLabels(labels))
	if err != nil {
		return engine.Image{}, fmt.Errorf("%s: %w", op, err)
	}
	rc, err := c.api.ImageImport(ctx, image.ImportSource{Source: rootfsTar, SourceName: "-"}, ref, image.ImportOptions{Changes: changes})
	if err != nil {
		return engine.Image{}, fail(op, err)
	}
	defer rc.Close()
	var id string
	// The daemon reports the new image id as the last status line ("sha256:…").
	dec := json.NewDecoder(rc)
	for {
		var m streamMessage
		if err := dec.Decode(&m); err != nil {
			if err == io.EOF {
				break
			}
			return engine.Image{}, engine.Wrap(op, 500, err)
		}
		if m.Error != nil {
			return engine.Image{}, engine.Wrap(op, 500, fmt.Errorf("%s", m.Error.Message))
		}
		if s := strings.TrimSpace(m.Status); s != "" {
			id = s
		}
	}
	if ref != "" {
		return c.InspectImage(ctx, ref)
	}
	return c.InspectImage(ctx, id)
}

// emptyAuth is the X-Registry-Auth value for anonymous access.
var emptyAuth = base64.URLEncoding.EncodeToString([]byte("{}"))

// PullImage pulls ref (name:tag or name@sha256:…) for platform ("" = native). Docker decides
// by its own configuration whether a registry may be plain HTTP (loopback registries are by
// default), so opts.Insecure only matters when Podman serves the API.
func (c *Client) PullImage(ctx context.Context, ref, platform string, opts engine.PullOptions) (engine.Image, error) {
	op := fmt.Sprintf("pull image %q", ref)
	var rc io.ReadCloser
	var err error
	if opts.Insecure && c.podman {
		// Podman's compatible pull has no TLS switch before 5.x: use its own endpoint.
		q := url.Values{"reference": {ref}, "tlsVerify": {"false"}, "quiet": {"false"}}
		if platform != "" {
			f := strings.SplitN(platform, "/", 3)
			if len(f) < 2 {
				return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Invalid("platform %q: want os/arch[/variant]", platform))
			}
			q.Set("os", f[0])
			q.Set("arch", f[1])
			if len(f) == 3 {
				q.Set("variant", f[2])
			}
		}
		rc, err = c.rawStream(ctx, http.MethodPost, "/libpod/images/pull", q, http.Header{"X-Registry-Auth": {emptyAuth}})
	} else {
		rc, err = c.api.ImagePull(ctx, ref, image.PullOptions{Platform: platform})
	}
	if err != nil {
		return engine.Image{}, fail(op, err)
	}
	defer rc.Close()
	if err := readStream(rc, opts.Progress, nil); err != nil {
		return engine.Image{}, engine.Wrap(op, 500, err)
	}
	return c.InspectImage(ctx, ref)
}

// PushImage pushes ref to its registry and returns the manifest digest the registry stored.
func (c *Client) PushImage(ctx context.Context, ref string, opts engine.PullOptions) (string, error) {
	op := fmt.Sprintf("push image %q", ref)
	var rc io.ReadCloser
	var err error
	if opts.Insecure && c.podman {
		name, tag := ref, "latest"
		if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
			name, tag = ref[:i], ref[i+1:]
		}
		q := url.Values{"tag": {tag}, "tlsVerify": {"false"}}
		rc, err = c.rawStream(ctx, http.MethodPost, "/images/"+name+"/push", q, http.Header{"X-Registry-Auth": {emptyAuth}})
	} else {
		rc, err = c.api.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: emptyAuth})
	}
	if err != nil {
		return "", fail(op, err)
	}
	defer rc.Close()
	var digest string
	err = readStream(rc, opts.Progress, func(raw json.RawMessage) {
		var a struct{ Digest string }
		if json.Unmarshal(raw, &a) == nil && a.Digest != "" {
			digest = a.Digest
		}
	})
	if err != nil {
		return "", engine.Wrap(op, 500, err)
	}
	if digest == "" {
		if digest, err = engine.RegistryDigest(ctx, ref, opts.Insecure); err != nil {
			return "", fmt.Errorf("%s: %w", op, err)
		}
	}
	return digest, nil
}

// InspectImage describes the image ref (name, id or name@digest); fault.ErrNotFound when absent.
func (c *Client) InspectImage(ctx context.Context, ref string) (engine.Image, error) {
	r, err := c.api.ImageInspect(ctx, ref)
	if err != nil {
		return engine.Image{}, fail(fmt.Sprintf("inspect image %q", ref), err)
	}
	img := engine.Image{
		ID:      r.ID,
		Names:   slices.Clone(r.RepoTags),
		Digests: slices.Clone(r.RepoDigests),
		Size:    r.Size,
		Arch:    r.Architecture,
	}
	if r.Config != nil {
		img.Labels = maps.Clone(r.Config.Labels)
	}
	if t, err := time.Parse(time.RFC3339Nano, r.Created); err == nil {
		img.Created = t
	}
	return img, nil
}

// ListImages lists the images carrying every label in labels (an empty value matches any).
func (c *Client) ListImages(ctx context.Context, labels map[string]string) ([]engine.Image, error) {
	list, err := c.api.ImageList(ctx, image.ListOptions{Filters: labelArgs(labels)})
	if err != nil {
		return nil, fail("list images", err)
	}
	out := make([]engine.Image, 0, len(list))
	for _, s := range list {
		if !engine.MatchLabels(s.Labels, labels) {
			continue
		}
		out = append(out, engine.Image{
			ID:      s.ID,
			Names:   slices.Clone(s.RepoTags),
			Digests: slices.Clone(s.RepoDigests),
			Labels:  maps.Clone(s.Labels),
			Size:    s.Size,
			Created: time.Unix(s.Created, 0),
		})
	}
	return out, nil
}

// TagImage adds the tag ref to image id.
func (c *Client) TagImage(ctx context.Context, id, ref string) error {
	if err := c.api.ImageTag(ctx, id, ref); err != nil {
		return fail(fmt.Sprintf("tag image %q as %q", id, ref), err)
	}
	return nil
}

// RemoveImage removes ref: a tag when the image has others, else the image. An image a
// container uses is fault.ErrConflict; a missing one fault.ErrNotFound.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	if _, err := c.api.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil {
		return fail(fmt.Sprintf("remove image %q", ref), err)
	}
	return nil
}

// labelArgs renders a label selector as Docker filter arguments.
func labelArgs(labels map[string]string) filters.Args {
	args := filters.NewArgs()
	for _, l := range engine.LabelFilters(labels) {
		args.Add("label", l)
	}
	return args
}
