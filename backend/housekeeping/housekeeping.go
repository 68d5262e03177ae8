// Package housekeeping finds what Cubicle left behind on the container engine — desktop
// containers whose data directory or record no longer exists, desktop volumes no record or
// container uses, desktop image tags nothing uses — for `cubicle doctor` and Settings → Local
// VM, and removes exactly what a person picked from that list. Nothing here removes anything
// on its own: Scan only looks, and Clean removes only the named items that a fresh scan still
// finds to be leftovers. A volume holds someone's work files, so it is removed only when it is
// named explicitly.
//
// Whose is a container? Every desktop, task desktop and probe container Cubicle makes has
// its data directory's run directory bind-mounted at /run/cubicle (<data dir>/run/<instance>),
// so the mount's host side names the data directory that owns it. A container is a leftover
// when that directory holds no Cubicle data file any more (a removed install, a test's
// temporary directory), or when it is this data directory and no record of this store knows
// its instance. Containers of another data directory that still exists are never judged.
//
// A volume is a leftover when no record of this store names it and no container mounts it, or
// when the only containers that mount it are leftovers themselves. An image tag of the desktop
// repository is unused when no container was created from it, this store has not prepared it,
// and it is not what the current recipe builds.
//
// A Housekeeper is safe for concurrent use; Scan and Clean take the engine's time (Clean
// removes one item after the other).
package housekeeping

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/images"
	"cubicle/images/guest/wire"
)

// Engine is what housekeeping needs of the container engine (both adapters satisfy it).
type Engine interface {
	ListContainers(ctx context.Context, labels map[string]string) ([]engine.ContainerState, error)
	InspectContainer(ctx context.Context, id string) (engine.ContainerState, error)
	RemoveContainer(ctx context.Context, id string, force bool) error
	Volumes(ctx context.Context, labels map[string]string) ([]engine.Volume, error)
	RemoveVolume(ctx context.Context, name string) error
	VolumeSizes(ctx context.Context, names []string) (map[string]int64, error)
	ListImages(ctx context.Context, labels map[string]string) ([]engine.Image, error)
	RemoveImage(ctx context.Context, ref string) error
}

// Records is what housekeeping reads of this data directory's store (*store.Store satisfies
// it). Records returns every desktop record of every node.
type Records interface {
	VMInstances(nodeID string) ([]store.VMInstance, error)
	VMImages(nodeID string) ([]store.VMImage, error)
}

// Config configures a Housekeeper. Engine and DataDir are required.
type Config struct {
	Engine Engine
	// DataDir is this Cubicle's data directory.
	DataDir string
	// Records is this data directory's store; nil when it cannot be read (another process
	// holds it): then this directory's own containers and volumes are not judged.
	Records Records
	// NodeID is the node whose records and prepared images count; "" = "local".
	NodeID string
	// Keep returns image references never to list (the images the current recipes build).
	Keep   func(ctx context.Context) []string
	Logger *slog.Logger
}

// Housekeeper scans for leftovers and cleans them up on request.
type Housekeeper struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and returns a Housekeeper.
func New(cfg Config) (*Housekeeper, error) {
	if cfg.Engine == nil || cfg.DataDir == "" {
		return nil, errors.New("housekeeping: Config.Engine and Config.DataDir are required")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "local"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("housekeeping: data directory: %w", err)
	}
	cfg.DataDir = canonical(abs)
	return &Housekeeper{cfg: cfg, log: cfg.Logger}, nil
}

// Container is a leftover container.
type Container struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	Instance string `json:"instance,omitempty"`
	Role     string `json:"role,omitempty"` // desktop | task | probe
	State    string `json:"state"`
	Running  bool   `json:"running"`
	Image    string `json:"image,omitempty"`
	// DataDir is the data directory that made it (the host side of its run directory).
	DataDir string `json:"dataDir"`
	Why     string `json:"why"`
}

// Volume is a leftover volume: someone's work files or browser profile.
type Volume struct {
	Name      string    `json:"name"`
	Instance  string    `json:"instance,omitempty"`
	Kind      string    `json:"kind,omitempty"` // workspace | browser-profile
	SizeBytes int64     `json:"sizeBytes"`      // -1 unknown
	CreatedAt time.Time `json:"createdAt,omitzero"`
	Why       string    `json:"why"`
}

// Image is an unused desktop image tag.
type Image struct {
	Ref       string    `json:"ref"`
	ID        string    `json:"id"`
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	Why       string    `json:"why"`
}

// Report is what Scan found.
type Report struct {
	Containers []Container `json:"containers"`
	Volumes    []Volume    `json:"volumes"`
	Images     []Image     `json:"images"`
	// Notes say what could not be judged and why (e.g. the store is held by a running Cubicle).
	Notes []string `json:"notes,omitempty"`
}

// Empty reports whether nothing was found.
func (r Report) Empty() bool { return len(r.Containers)+len(r.Volumes)+len(r.Images) == 0 }

// Scan lists the leftovers (see the package doc). It changes nothing.
func (h *Housekeeper) Scan(ctx context.Context) (Report, error) {
	rep := Report{Containers: []Container{}, Volumes: []Volume{}, Images: []Image{}}
	eng := h.cfg.Engine
	// The engine first, the records after: the desktop manager writes a record before it
	// creates a container or volume, so whatever the lists show has its record by now unless
	// it is really left over.
	all, err := eng.ListContainers(ctx, nil)
	if err != nil {
		return Report{}, fmt.Errorf("housekeeping: list containers: %w", err)
	}
	type inspected struct{ c, d engine.ContainerState }
	var managed []inspected
	usedImages := map[string]bool{}
	volUsers := map[string][]string{} // volume → ids of containers mounting it
	for _, c := range all {
		usedImages[c.Image], usedImages[c.ImageID] = true, true
		d, err := eng.InspectContainer(ctx, c.ID)
		if errors.Is(err, fault.ErrNotFound) {
			continue // removed while we looked
		} else if err != nil {
			return Report{}, fmt.Errorf("housekeeping: inspect container %s: %w", c.Name, err)
		}
		for _, v := range d.Volumes {
			volUsers[v.Name] = append(volUsers[v.Name], c.ID)
		}
		// A desktop manager's container: managed, of a node, in a role (bench runs and test
		// containers carry neither and are their owners' business).
		role := c.Labels[wire.LabelRole]
		if c.Labels[engine.LabelManaged] == "true" && c.Labels[wire.LabelCompose] == "" && c.Labels[wire.LabelNode] != "" &&
			(role == "desktop" || role == "task" || role == "probe") {
			managed = append(managed, inspected{c, d})
		}
	}
	vols, err := eng.Volumes(ctx, map[string]string{engine.LabelManaged: "true"})
	if err != nil {
		return Report{}, fmt.Errorf("housekeeping: list volumes: %w", err)
	}
	var instances []store.VMInstance
	var prepared []store.VMImage
	if h.cfg.Records == nil {
		rep.Notes = append(rep.Notes, "this data directory's records cannot be read now (is Cubicle running with it? "+
			"Settings → Local VM → Leftovers shows them there): its own containers and volumes are not judged")
	} else {
		if instances, err = h.cfg.Records.VMInstances(h.cfg.NodeID); err != nil {
			return Report{}, fmt.Errorf("housekeeping: read desktop records: %w", err)
		}
		if prepared, err = h.cfg.Records.VMImages(h.cfg.NodeID); err != nil {
			return Report{}, fmt.Errorf("housekeeping: read prepared images: %w", err)
		}
	}
	known := map[string]bool{}   // instance ids with a record
	ourVols := map[string]bool{} // volume names a record names
	for _, in := range instances {
		known[in.ID] = true
		ourVols[in.WorkspaceVol], ourVols[in.ProfileVol] = true, true
	}
	leftover := map[string]bool{} // container ids found to be leftovers
	for _, x := range managed {
		if lc, ok := h.judge(x.c, x.d, known); ok {
			rep.Containers = append(rep.Containers, lc)
			leftover[x.c.ID] = true
		}
	}
	for _, v := range vols {
		if v.Labels[wire.LabelInstance] == "" || ourVols[v.Name] {
			continue // not a desktop's volume, or a record of ours names it
		}
		users := volUsers[v.Name]
		why := ""
		switch {
		case len(users) == 0 && h.cfg.Records != nil:
			why = "no desktop record of this Cubicle names it and no container uses it (a removed desktop's work files, " +
				"or those of another Cubicle data directory on this engine)"
		case len(users) > 0 && !slices.ContainsFunc(users, func(id string) bool { return !leftover[id] }):
			why = "only leftover containers use it"
		}
		if why != "" {
			rep.Volumes = append(rep.Volumes, Volume{Name: v.Name, Instance: v.Labels[wire.LabelInstance],
				Kind: v.Labels[wire.LabelVolume], SizeBytes: -1, CreatedAt: v.CreatedAt, Why: why})
		}
	}
	if len(rep.Volumes) > 0 {
		names := make([]string, len(rep.Volumes))
		for i, v := range rep.Volumes {
			names[i] = v.Name
		}
		if sizes, err := eng.VolumeSizes(ctx, names); err == nil {
			for i := range rep.Volumes {
				if n, ok := sizes[rep.Volumes[i].Name]; ok {
					rep.Volumes[i].SizeBytes = n
				}
			}
		} else {
			rep.Notes = append(rep.Notes, "the engine could not measure the volumes: "+err.Error())
		}
	}

	keep := map[string]bool{}
	for _, p := range prepared {
		keep[p.Ref], keep[p.ImageID] = true, true
	}
	if h.cfg.Keep != nil {
		for _, r := range h.cfg.Keep(ctx) {
			keep[r] = true
		}
	}
	imgs, err := eng.ListImages(ctx, map[string]string{engine.LabelManaged: "true"})
	if err != nil {
		return Report{}, fmt.Errorf("housekeeping: list images: %w", err)
	}
	for _, img := range imgs {
		if usedImages[img.ID] {
			continue
		}
		for _, ref := range img.Names {
			if !strings.HasPrefix(ref, images.DesktopRepository+":") || keep[ref] || usedImages[ref] || keep[img.ID] {
				continue
			}
			rep.Images = append(rep.Images, Image{Ref: ref, ID: img.ID, SizeBytes: img.Size, CreatedAt: img.Created,
				Why: "no container uses it, this Cubicle has not prepared it, and the current recipe builds another"})
		}
	}
	slices.SortFunc(rep.Containers, func(a, b Container) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(rep.Volumes, func(a, b Volume) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(rep.Images, func(a, b Image) int { return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(a.Ref, b.Ref)) })
	return rep, nil
}

// judge decides whether managed container c (inspected as d) is a leftover.
func (h *Housekeeper) judge(c, d engine.ContainerState, known map[string]bool) (Container, bool) {
	src := ""
	for _, m := range d.Mounts {
		if m.Target == wire.RunDir {
			src = m.Source
		}
	}
	var dir string
	switch {
	case src != "": // <data dir>/run/<instance>
		dir = canonical(filepath.Dir(filepath.Dir(filepath.Clean(src))))
	case c.Labels[wire.LabelDataDir] != "" && filepath.IsAbs(c.Labels[wire.LabelDataDir]):
		dir = canonical(filepath.Clean(c.Labels[wire.LabelDataDir])) // no run directory: the exec link
	default:
		return Container{}, false // not a container of a data directory
	}
	lc := Container{Name: c.Name, ID: c.ID, Instance: c.Labels[wire.LabelInstance], Role: c.Labels[wire.LabelRole],
		State: c.Status, Running: c.Running, Image: c.Image, DataDir: dir}
	if dir == h.cfg.DataDir {
		if h.cfg.Records == nil {
			return Container{}, false
		}
		switch {
		case lc.Role == "probe":
			if src == "" {
				return Container{}, false // a probe without a run directory: cannot tell, leave it
			}
			if _, err := os.Stat(filepath.Clean(src)); err == nil {
				return Container{}, false // a preparation's probe at work
			}
			lc.Why = "the probe of a preparation that did not finish"
			return lc, true
		case lc.Instance != "" && !known[lc.Instance]:
			lc.Why = "no record of this Cubicle knows its desktop"
			return lc, true
		}
		return Container{}, false
	}
	if _, err := os.Stat(filepath.Join(dir, "cubicle.db")); errors.Is(err, os.ErrNotExist) {
		lc.Why = "its data directory " + dir + " no longer holds a Cubicle data file"
		return lc, true
	}
	return Container{}, false // another Cubicle data directory that still exists: its own business
}

// Selection names the leftovers to remove, exactly as Scan listed them (container names,
// volume names, image references).
type Selection struct {
	Containers []string `json:"containers"`
	Volumes    []string `json:"volumes"`
	Images     []string `json:"images"`
}

// Outcome is what became of one selected item.
type Outcome struct {
	Kind    string `json:"kind"` // container | volume | image
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
	Error   string `json:"error,omitempty"`
}

// Clean removes the selected items that a fresh scan still finds to be leftovers, containers
// first (so that their volumes are free), then volumes, then images. An item that is not (or
// no longer) a leftover is refused in its Outcome and left alone. It returns an outcome per
// selected item; the error is for the scan itself.
func (h *Housekeeper) Clean(ctx context.Context, sel Selection) ([]Outcome, error) {
	if len(sel.Containers)+len(sel.Volumes)+len(sel.Images) == 0 {
		return nil, fault.Invalid("nothing selected: name the leftover containers, volumes or images to remove")
	}
	rep, err := h.Scan(ctx)
	if err != nil {
		return nil, err
	}
	out := []Outcome{}
	refuse := func(kind, name string) {
		out = append(out, Outcome{Kind: kind, Name: name,
			Error: "not a leftover (any more): rescan and choose from the list; nothing was removed"})
	}
	done := func(kind, name string, err error) {
		o := Outcome{Kind: kind, Name: name, Removed: err == nil}
		if err != nil {
			o.Error = err.Error()
		} else {
			h.log.Info("housekeeping removed a leftover", "kind", kind, "name", name)
		}
		out = append(out, o)
	}
	for _, name := range sel.Containers {
		i := slices.IndexFunc(rep.Containers, func(c Container) bool { return c.Name == name || c.ID == name })
		if i < 0 {
			refuse("container", name)
			continue
		}
		err := h.cfg.Engine.RemoveContainer(ctx, rep.Containers[i].ID, true)
		if errors.Is(err, fault.ErrNotFound) {
			err = nil
		}
		if lc := rep.Containers[i]; err == nil && lc.DataDir == h.cfg.DataDir && lc.Instance != "" {
			os.RemoveAll(filepath.Join(h.cfg.DataDir, "run", lc.Instance)) // its run directory, ours
		}
		done("container", name, err)
	}
	for _, name := range sel.Volumes {
		if !slices.ContainsFunc(rep.Volumes, func(v Volume) bool { return v.Name == name }) {
			refuse("volume", name)
			continue
		}
		err := h.cfg.Engine.RemoveVolume(ctx, name)
		if errors.Is(err, fault.ErrNotFound) {
			err = nil
		}
		done("volume", name, err)
	}
	for _, ref := range sel.Images {
		if !slices.ContainsFunc(rep.Images, func(i Image) bool { return i.Ref == ref }) {
			refuse("image", ref)
			continue
		}
		err := h.cfg.Engine.RemoveImage(ctx, ref)
		if errors.Is(err, fault.ErrNotFound) {
			err = nil
		}
		done("image", ref, err)
	}
	return out, nil
}

// canonical resolves symlinks in p where it exists (so /tmp and its real path compare equal).
func canonical(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}
