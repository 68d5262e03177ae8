// Package vmtest holds in-memory stand-ins for the desktop manager's dependencies: a container
// engine, an image builder, a driver dialer, a manual clock and an activity hook. They let
// tests of vm and of its consumers (the API) run the real manager logic without an engine.
// Real-engine tests cover the same paths against Podman.
package vmtest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/images"
	"cubicle/images/guest/wire"
)

// Engine is an in-memory container engine (it satisfies vm.Engine). Safe for concurrent use.
type Engine struct {
	mu      sync.Mutex
	seq     int
	ctrs    map[string]*Container // by id
	vols    map[string]map[string]string
	calls   []string
	failOn  map[string]error // method name → error to return once
	stopped []time.Duration  // timeouts of StopContainer calls
}

// Container is one container of the fake engine.
type Container struct {
	Spec  engine.ContainerSpec
	State engine.ContainerState
}

// NewEngine returns an empty engine.
func NewEngine() *Engine {
	return &Engine{ctrs: map[string]*Container{}, vols: map[string]map[string]string{}, failOn: map[string]error{}}
}

func (f *Engine) hit(op string) error {
	f.calls = append(f.calls, op)
	if err, ok := f.failOn[op]; ok {
		delete(f.failOn, op)
		return err
	}
	return nil
}

// Info describes a fake Podman.
func (f *Engine) Info(ctx context.Context) (engine.Info, error) {
	return engine.Info{Kind: engine.Podman, Version: "fake", Socket: "unix:///fake", Arch: "amd64"}, nil
}

// CreateContainer stores the spec; a taken name is fault.ErrExists, a missing volume an error.
func (f *Engine) CreateContainer(ctx context.Context, spec engine.ContainerSpec) (engine.ContainerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit("create"); err != nil {
		return engine.ContainerState{}, err
	}
	for _, c := range f.ctrs {
		if c.Spec.Name == spec.Name {
			return engine.ContainerState{}, fault.Exists("container name %q in use", spec.Name)
		}
	}
	for _, v := range spec.Volumes {
		if _, ok := f.vols[v.Name]; !ok {
			return engine.ContainerState{}, fmt.Errorf("volume %s missing", v.Name)
		}
	}
	f.seq++
	id := fmt.Sprintf("ctr%03d", f.seq)
	st := engine.ContainerState{ID: id, Name: spec.Name, Image: spec.Image, Labels: spec.Labels, Status: "created"}
	f.ctrs[id] = &Container{Spec: spec, State: st}
	return st, nil
}

// Add puts a container the engine "already has" (recovery, compose tests) and returns its id.
func (f *Engine) Add(name string, labels map[string]string, running bool, mounts ...engine.Mount) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("ctr%03d", f.seq)
	f.ctrs[id] = &Container{Spec: engine.ContainerSpec{Name: name, Labels: labels, Mounts: mounts},
		State: engine.ContainerState{ID: id, Name: name, Image: "img", Labels: labels, Running: running}}
	return id
}

func (f *Engine) find(id string) (*Container, error) {
	if c, ok := f.ctrs[id]; ok {
		return c, nil
	}
	for _, c := range f.ctrs {
		if c.Spec.Name == id {
			return c, nil
		}
	}
	return nil, fault.NotFound("no container %s", id)
}

// StartContainer marks the container running.
func (f *Engine) StartContainer(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit("start"); err != nil {
		return err
	}
	c, err := f.find(id)
	if err != nil {
		return err
	}
	c.State.Running, c.State.Status, c.State.StartedAt = true, "running", time.Now()
	return nil
}

// StopContainer marks it stopped and records the timeout.
func (f *Engine) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit("stop"); err != nil {
		return err
	}
	c, err := f.find(id)
	if err != nil {
		return err
	}
	f.stopped = append(f.stopped, timeout)
	c.State.Running, c.State.Status = false, "exited"
	return nil
}

// RemoveContainer deletes it (running only with force).
func (f *Engine) RemoveContainer(ctx context.Context, id string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit("remove"); err != nil {
		return err
	}
	c, err := f.find(id)
	if err != nil {
		return err
	}
	if c.State.Running && !force {
		return fault.Conflict("running")
	}
	delete(f.ctrs, c.State.ID)
	return nil
}

// InspectContainer returns its state.
func (f *Engine) InspectContainer(ctx context.Context, id string) (engine.ContainerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return engine.ContainerState{}, err
	}
	return c.State, nil
}

// ListContainers returns the containers carrying all of labels.
func (f *Engine) ListContainers(ctx context.Context, labels map[string]string) ([]engine.ContainerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []engine.ContainerState
	for _, c := range f.ctrs {
		if engine.MatchLabels(c.State.Labels, labels) {
			out = append(out, c.State)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// EnsureVolume creates a volume once.
func (f *Engine) EnsureVolume(ctx context.Context, name string, labels map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vols[name]; !ok {
		f.vols[name] = labels
	}
	return nil
}

// RemoveVolume deletes a volume: fault.ErrNotFound when absent, fault.ErrConflict while a
// container mounts it.
func (f *Engine) RemoveVolume(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit("remove-volume"); err != nil {
		return err
	}
	if _, ok := f.vols[name]; !ok {
		return fault.NotFound("no volume %s", name)
	}
	for _, c := range f.ctrs {
		for _, v := range c.Spec.Volumes {
			if v.Name == name {
				return fault.Conflict("volume %s is in use by container %s", name, c.Spec.Name)
			}
		}
	}
	delete(f.vols, name)
	return nil
}

// VolumeSizes says every volume (of names; all when empty) holds VolumeSize bytes.
func (f *Engine) VolumeSizes(ctx context.Context, names []string) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	for v := range f.vols {
		if len(names) == 0 || slices.Contains(names, v) {
			out[v] = VolumeSize
		}
	}
	return out, nil
}

// VolumeSize is the size the fake engine reports for every volume.
const VolumeSize = 5 << 20

// ContainerStats reports fixed numbers for a running container (12.5 % CPU, 100 MiB of 3 GiB,
// 42 processes); fault.ErrConflict when it does not run.
func (f *Engine) ContainerStats(ctx context.Context, id string) (engine.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return engine.Stats{}, err
	}
	if !c.State.Running {
		return engine.Stats{}, fault.Conflict("container %s does not run", id)
	}
	return engine.Stats{CPUPercent: 12.5, MemoryBytes: 100 << 20, MemoryLimit: 3 << 30, PIDs: 42}, nil
}

// Running returns the names of the running containers, sorted.
func (f *Engine) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.ctrs {
		if c.State.Running {
			out = append(out, c.Spec.Name)
		}
	}
	sort.Strings(out)
	return out
}

// ByName returns a copy of the container called name.
func (f *Engine) ByName(name string) (*Container, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.ctrs {
		if c.Spec.Name == name {
			cp := *c
			return &cp, true
		}
	}
	return nil, false
}

// Dial is a fake driver dialer: it answers when a running container has the socket's
// directory bind-mounted at /run/cubicle (so the run-dir wiring is checked), else waits for
// ctx. With blank, the driver's screenshots are a single colour.
func (f *Engine) Dial(blank bool) func(ctx context.Context, socketPath string) (*Guest, error) {
	return func(ctx context.Context, socketPath string) (*Guest, error) {
		for {
			f.mu.Lock()
			ok := false
			for _, c := range f.ctrs {
				for _, mt := range c.Spec.Mounts {
					if mt.Source == filepath.Dir(socketPath) && mt.Target == wire.RunDir && c.State.Running {
						ok = true
					}
				}
			}
			f.mu.Unlock()
			if ok {
				return &Guest{blank: blank}, nil
			}
			select {
			case <-ctx.Done():
				return nil, fault.Unavailable("no driver at %s", socketPath)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// Guest is a fake driver connection.
type Guest struct{ blank bool }

// Hello returns a fixed handshake.
func (g *Guest) Hello() guest.Hello {
	return guest.Hello{Protocol: guest.ProtocolVersion, Driver: "fake-1", Screen: guest.Size{Width: 64, Height: 48}}
}

// Screenshot returns a 64x48 PNG: a gradient, or one colour when blank.
func (g *Guest) Screenshot(ctx context.Context, o guest.ScreenshotOptions) (guest.Frame, error) {
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	for y := 0; y < 48; y++ {
		for x := 0; x < 64; x++ {
			c := color.RGBA{20, 30, 40, 255}
			if !g.blank {
				c = color.RGBA{uint8(x * 4), uint8(y * 5), uint8(x + y), 255}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	return guest.Frame{ID: 1, Width: 64, Height: 48, Format: "png", Data: buf.Bytes()}, nil
}

// Close does nothing.
func (g *Guest) Close() error { return nil }

// Builder is an image builder (vm.ImageBuilder) that "builds" instantly, or blocks until its
// gate is closed, or fails with a set error.
type Builder struct {
	mu    sync.Mutex
	calls int
	gate  chan struct{} // nil: no wait
	err   error
}

// SetGate makes later Ensure calls wait until gate is closed (nil: no wait).
func (b *Builder) SetGate(gate chan struct{}) { b.mu.Lock(); b.gate = gate; b.mu.Unlock() }

// SetErr makes later Ensure calls fail with err (nil: succeed).
func (b *Builder) SetErr(err error) { b.mu.Lock(); b.err = err; b.mu.Unlock() }

// Calls returns how many times Ensure was called.
func (b *Builder) Calls() int { b.mu.Lock(); defer b.mu.Unlock(); return b.calls }

// Ensure reports progress and returns localhost/cubicle-desktop:<key>-abc.
func (b *Builder) Ensure(ctx context.Context, key images.Key, progress func(images.Progress)) (images.Result, error) {
	b.mu.Lock()
	b.calls++
	gate, err := b.gate, b.err
	b.mu.Unlock()
	progress(images.Progress{Step: "build 1/2", Line: "RUN apt-get install", Percent: 50})
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return images.Result{}, ctx.Err()
		}
	}
	if err != nil {
		return images.Result{}, err
	}
	progress(images.Progress{Step: "done", Percent: 100})
	return images.Result{Key: key, Ref: "localhost/cubicle-desktop:" + string(key) + "-abc", ImageID: "sha256:img-" + string(key),
		RecipeHash: "abc123", Reused: false}, nil
}

// Clock is a manual vm.Clock: timers fire when Advance passes their deadline.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

type timer struct {
	at      time.Time
	c       chan time.Time
	stopped bool
}

// NewClock returns a clock at 2026-01-01 09:00 UTC.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when Advance reaches now+d (at once when d ≤ 0).
func (c *Clock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		t.stopped = true
	} else {
		c.timers = append(c.timers, t)
	}
	return t.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock forward and fires the timers that are due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		if t.stopped {
			continue
		}
		if !t.at.After(c.now) {
			t.stopped = true
			t.c <- c.now
			continue
		}
		keep = append(keep, t)
	}
	c.timers = keep
}

// Activity is a vm.Activity whose busy set the test controls.
type Activity struct {
	mu       sync.Mutex
	busy     map[string]string
	stopAlls int
	revoked  []string
}

// Revoke ends whoever uses id (the busy mark) and records the call.
func (a *Activity) Revoke(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.revoked = append(a.revoked, id)
	delete(a.busy, id)
}

// Revoked returns the ids Revoke was called with, in order.
func (a *Activity) Revoked() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.revoked...)
}

// SetBusy marks id as used by who ("" clears it).
func (a *Activity) SetBusy(id, who string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy == nil {
		a.busy = map[string]string{}
	}
	if who == "" {
		delete(a.busy, id)
	} else {
		a.busy[id] = who
	}
}

// StopAlls returns how many times StopAll was called.
func (a *Activity) StopAlls() int { a.mu.Lock(); defer a.mu.Unlock(); return a.stopAlls }

// Busy reports who SetBusy said uses id.
func (a *Activity) Busy(id string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	who, ok := a.busy[id]
	return who, ok
}

// StopAll counts the call and clears the busy set.
func (a *Activity) StopAll(ctx context.Context, reason string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopAlls++
	a.busy = map[string]string{}
	return nil
}

// FailNext makes the next call of op ("create", "start", "stop", "remove") fail with err.
func (f *Engine) FailNext(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failOn[op] = err
}

// Calls returns the operations called so far, in order.
func (f *Engine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// StopTimeouts returns the timeouts StopContainer was called with.
func (f *Engine) StopTimeouts() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.stopped...)
}

// Volumes returns the names of the volumes.
func (f *Engine) Volumes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for v := range f.vols {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Count returns the number of containers.
func (f *Engine) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ctrs)
}
