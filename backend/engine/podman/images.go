package podman

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	buildahDefine "github.com/containers/buildah/define"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// BuildImage builds spec into an image tagged spec.Tag, writing the build output to
// spec.Progress as it arrives. A failing build step is fault.ErrUnavailable with the
// engine's message.
func (c *Client) BuildImage(ctx context.Context, spec engine.BuildSpec) (engine.Image, error) {
	op := fmt.Sprintf("build image %q", spec.Tag)
	dir := spec.ContextDir
	switch {
	case (dir == "") == (spec.Context == nil):
		return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Invalid("give exactly one of a context directory and a context stream"))
	case spec.Tag == "":
		return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Invalid("a tag is required"))
	case dir == "":
		tmp, err := os.MkdirTemp("", "cubicle-build-")
		if err != nil {
			return engine.Image{}, fmt.Errorf("%s: %w", op, err)
		}
		defer os.RemoveAll(tmp)
		if err := engine.ExtractTar(spec.Context, tmp); err != nil {
			return engine.Image{}, fmt.Errorf("%s: %w", op, err)
		}
		dir = tmp
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Invalid("context directory: %v", err))
	}
	file := spec.Dockerfile
	if file == "" {
		file = "Containerfile"
	}
	if !filepath.IsLocal(file) {
		return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Invalid("containerfile %q must be inside the context", file))
	}
	out := spec.Progress
	if out == nil {
		out = io.Discard
	}
	opts := types.BuildOptions{BuildOptions: buildahDefine.BuildOptions{
		ContextDirectory:       dir,
		Output:                 spec.Tag,
		Labels:                 labelList(engine.ManagedLabels(spec.Labels)),
		Args:                   spec.BuildArgs,
		Out:                    out,
		Err:                    out,
		ReportWriter:           out,
		RemoveIntermediateCtrs: true,
		PullPolicy:             buildahDefine.PullIfMissing,
	}}
	if spec.Platform != "" {
		p, err := parsePlatform(spec.Platform)
		if err != nil {
			return engine.Image{}, fmt.Errorf("%s: %w", op, err)
		}
		opts.OS, opts.Architecture = p.os, p.arch
	}
	var rep *types.BuildReport
	for attempt := 1; ; attempt++ {
		rep, err = images.Build(c.ctx(ctx), []string{filepath.Join(dir, file)}, opts)
		if err == nil || attempt > stepKillRetries || ctx.Err() != nil || !c.engineKilledStep(err) {
			break
		}
		// The steps before the killed one are cached: building again resumes there.
		c.logger.Warn("the Podman service killed a build step (a known Podman bug before 4.6: "+
			"containers/podman#17918); building again", "tag", spec.Tag, "attempt", attempt+1, "error", err)
		fmt.Fprintf(out, "Cubicle: Podman %s killed the build step (a known bug of Podman before 4.6, "+
			"containers/podman#17918); building again (attempt %d of %d)\n", c.version, attempt+1, stepKillRetries+1)
	}
	if err != nil {
		return engine.Image{}, failStream(op, err)
	}
	ref := spec.Tag
	if rep != nil && rep.ID != "" {
		ref = rep.ID
	}
	return c.InspectImage(ctx, ref)
}

// stepKillRetries is how often BuildImage builds again after the engine bug of
// engineKilledStep.
const stepKillRetries = 2

// engineKilledStep reports whether err is a build step the Podman service itself killed:
// before Podman 4.6 (Buildah 1.31) the process running a RUN step got PR_SET_PDEATHSIG tied to
// the OS thread that started it, and the Go runtime retires threads at will, so on a busy
// service a step dies now and then with "while running runtime: signal: killed"
// (containers/podman#17918, fixed by containers/buildah#4813). Debian 12 ships Podman 4.3.
// A step killed by anything else (the OOM killer) fails the same way and is tried again too,
// at most stepKillRetries times.
func (c *Client) engineKilledStep(err error) bool {
	return !c.atLeast(4, 6) && strings.Contains(err.Error(), "while running runtime: signal: killed")
}

// ImportImage creates an image from a root file system tar, like `podman import`, tags it ref
// and labels it with labels plus engine.LabelManaged.
func (c *Client) ImportImage(ctx context.Context, rootfsTar io.Reader, ref string, labels map[string]string) (engine.Image, error) {
	op := fmt.Sprintf("import image %q", ref)
	changes, err := engine.LabelChanges(engine.ManagedLabels(labels))
	if err != nil {
		return engine.Image{}, fmt.Errorf("%s: %w", op, err)
	}
	opts := new(images.ImportOptions).WithChanges(changes)
	if ref != "" {
		opts.WithReference(ref)
	}
	rep, err := images.Import(c.ctx(ctx), rootfsTar, opts)
	if err != nil {
		return engine.Image{}, fail(op, err)
	}
	return c.InspectImage(ctx, rep.Id)
}

// PullImage pulls ref (name:tag or name@sha256:…) for platform ("" = native).
func (c *Client) PullImage(ctx context.Context, ref, platform string, opts engine.PullOptions) (engine.Image, error) {
	op := fmt.Sprintf("pull image %q", ref)
	po := new(images.PullOptions).WithSkipTLSVerify(opts.Insecure)
	if opts.Progress != nil {
		po.WithProgressWriter(opts.Progress)
	} else {
		po.WithQuiet(true)
	}
	if platform != "" {
		p, err := parsePlatform(platform)
		if err != nil {
			return engine.Image{}, fmt.Errorf("%s: %w", op, err)
		}
		po.WithOS(p.os).WithArch(p.arch)
		if p.variant != "" {
			po.WithVariant(p.variant)
		}
	}
	ids, err := images.Pull(c.ctx(ctx), ref, po)
	if err != nil {
		return engine.Image{}, failStream(op, err)
	}
	if len(ids) == 0 {
		return engine.Image{}, fmt.Errorf("%s: %w", op, fault.Unavailable("the engine reported no image"))
	}
	img, err := c.InspectImage(ctx, ids[0])
	if err != nil {
		return engine.Image{}, err
	}
	return img, nil
}

// PushImage pushes ref to its registry and returns the manifest digest the registry stored.
func (c *Client) PushImage(ctx context.Context, ref string, opts engine.PullOptions) (string, error) {
	op := fmt.Sprintf("push image %q", ref)
	po := new(images.PushOptions).WithSkipTLSVerify(opts.Insecure)
	if opts.Progress != nil {
		po.WithProgressWriter(opts.Progress)
	} else {
		po.WithQuiet(true)
	}
	if err := images.Push(c.ctx(ctx), ref, ref, po); err != nil {
		return "", failStream(op, err)
	}
	// Services from 5.0 report the manifest digest in the push stream; older ones (4.3 here)
	// do not, so ask the registry.
	if d := po.GetManifestDigest(); d != "" && c.atLeast(5, 0) {
		return d, nil
	}
	d, err := engine.RegistryDigest(ctx, ref, opts.Insecure)
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	return d, nil
}

// InspectImage describes the image ref (name, id or name@digest); fault.ErrNotFound when absent.
func (c *Client) InspectImage(ctx context.Context, ref string) (engine.Image, error) {
	r, err := images.GetImage(c.ctx(ctx), ref, nil)
	if err != nil {
		return engine.Image{}, fail(fmt.Sprintf("inspect image %q", ref), err)
	}
	img := engine.Image{
		ID:      r.ID,
		Names:   slices.Clone(r.RepoTags),
		Digests: slices.Clone(r.RepoDigests),
		Labels:  maps.Clone(r.Labels),
		Size:    r.Size,
		Arch:    r.Architecture,
	}
	if r.Created != nil {
		img.Created = *r.Created
	}
	if img.Labels == nil && r.Config != nil {
		img.Labels = maps.Clone(r.Config.Labels)
	}
	return img, nil
}

// ListImages lists the images carrying every label in labels (an empty value matches any).
func (c *Client) ListImages(ctx context.Context, labels map[string]string) ([]engine.Image, error) {
	opts := new(images.ListOptions)
	if len(labels) > 0 {
		opts.WithFilters(map[string][]string{"label": engine.LabelFilters(labels)})
	}
	list, err := images.List(c.ctx(ctx), opts)
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
			Arch:    s.Arch,
		})
	}
	return out, nil
}

// TagImage adds the tag ref (repo[:tag], tag defaults to latest) to image id.
func (c *Client) TagImage(ctx context.Context, id, ref string) error {
	repo, tag := splitRef(ref)
	if err := images.Tag(c.ctx(ctx), id, tag, repo, nil); err != nil {
		return fail(fmt.Sprintf("tag image %q as %q", id, ref), err)
	}
	return nil
}

// RemoveImage removes ref: a tag when the image has others, else the image. An image a
// container uses is fault.ErrConflict; a missing one fault.ErrNotFound.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	op := fmt.Sprintf("remove image %q", ref)
	rep, errs := images.Remove(c.ctx(ctx), []string{ref}, nil)
	if len(errs) == 0 {
		return nil
	}
	if rep == nil { // the request itself failed
		return fail(op, errs[0])
	}
	// The service answers 200 with per-image errors; its exit code says which kind, as
	// `podman rmi` does: 1 no such image, 2 image in use.
	switch rep.ExitCode {
	case 1:
		return engine.Wrap(op, http.StatusNotFound, errs[0])
	case 2:
		return engine.Wrap(op, http.StatusConflict, errs[0])
	default:
		return engine.Wrap(op, http.StatusInternalServerError, errs[0])
	}
}

// labelList renders labels as the build API's "key=value" list, sorted.
func labelList(labels map[string]string) []string {
	out := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k+"="+labels[k])
	}
	return out
}

// splitRef splits "host:port/name:tag" into repository and tag ("latest" when absent).
func splitRef(ref string) (repo, tag string) {
	slash := strings.LastIndex(ref, "/")
	if i := strings.LastIndex(ref, ":"); i > slash {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

type platform struct{ os, arch, variant string }

// parsePlatform reads "os/arch[/variant]".
func parsePlatform(s string) (platform, error) {
	f := strings.Split(s, "/")
	if len(f) < 2 || len(f) > 3 || f[0] == "" || f[1] == "" {
		return platform{}, fault.Invalid("platform %q: want os/arch[/variant]", s)
	}
	p := platform{os: f[0], arch: f[1]}
	if len(f) == 3 {
		p.variant = f[2]
	}
	return p, nil
}
