// Package vmtest holds in-memory stand-ins for the desktop manager's dependencies: a container
// engine whose containers run fake drivers speaking the real protocol (driver.go), an image
// builder, a manual clock and an activity hook. They let
// tests of vm and of its consumers (the API) run the real manager logic without an engine.
// Real-engine tests cover the same paths against Podman.
package vmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/images"
)

// Engine is an in-memory container engine (it satisfies vm.Engine). Safe for concurrent use.
type Engine struct {
	mu     sync.Mutex
	seq    int
	ctrs   map[string]*Container // by id
	vols   map[string]map[string]string
	calls  []string
	failOn map[string]error // method name → error to return once
	// failAfter: method name → error to return once after doing what was asked (StopContainer
	// only: an engine that reports a stop as failed although the container stopped)
	failAfter map[string]error
	stopped   []time.Duration // timeouts of StopContainer calls
	blank     bool            // the fake drivers' screens are one colour
	subs      map[*io.PipeWriter]bool
	block     map[string]chan struct{} // method name → gate the call waits on
}

// Container is one container of the fake engine.
type Container struct {
	Spec  engine.ContainerSpec
	State engine.ContainerState

	driverDead bool       // KillDriver until the next start
	conns      []net.Conn // the driver's open connections
}

// NewEngine returns an empty engine.
func NewEngine() *Engine {
	return &Engine{ctrs: map[string]*Container{}, vols: map[string]map[string]string{}, failOn: map[string]error{}, failAfter: map[string]error{},
		subs: map[*io.PipeWriter]bool{}, block: map[string]chan struct{}{}}
}

// hit records a call of op and returns the error FailNext set for it. When Block set a gate
// for op, the call waits (with f.mu released) until the gate is closed or ctx ends.
func (f *Engine) hit(ctx context.Context, op string) error {
	f.calls = append(f.calls, op)
	if gate, ok := f.block[op]; ok {
		f.mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
			f.mu.Lock()
			return fault.Unavailable("%s: %v", op, ctx.Err())
		}
		f.mu.Lock()
	}
	if err, ok := f.failOn[op]; ok {
		delete(f.failOn, op)
		return err
	}
	return nil
}

// Block makes calls of op ("create", "start", "stop", "remove") wait until gate is closed
// (or their context ends); nil removes the gate.
func (f *Engine) Block(op string, gate chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gate == nil {
		delete(f.block, op)
		return
	}
	f.block[op] = gate
}

// emit sends an event of c to every subscriber. f.mu is held.
func (f *Engine) emit(c *Container, action string) {
	attrs := map[string]string{"name": c.State.Name, "image": c.State.Image}
	for k, v := range c.State.Labels {
		attrs[k] = v
	}
	line, _ := json.Marshal(map[string]any{"Type": "container", "Action": action, "id": c.State.ID,
		"Actor": map[string]any{"ID": c.State.ID, "Attributes": attrs}, "timeNano": time.Now().UnixNano()})
	line = append(line, '\n')
	for w := range f.subs {
		go w.Write(line) // a pipe write blocks until read; never under f.mu
	}
}

// Events subscribes to the fake engine's container events (the same JSON lines a real engine
// sends, read by engine.NewEventStream).
func (f *Engine) Events(ctx context.Context, labels map[string]string) (*engine.EventStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit(ctx, "events"); err != nil {
		return nil, err
	}
	r, w := io.Pipe()
	f.subs[w] = true
	go func() { // ends with the subscription
		<-ctx.Done()
		w.CloseWithError(ctx.Err())
	}()
	return engine.NewEventStream(&pipeReader{r: r, onClose: func() {
		f.mu.Lock()
		delete(f.subs, w)
		f.mu.Unlock()
		w.Close()
	}}, labels), nil
}

// EndEvents ends every subscription as a restarting engine would.
func (f *Engine) EndEvents() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.subs {
		w.CloseWithError(io.ErrUnexpectedEOF)
		delete(f.subs, w)
	}
}

// Subscribers returns how many event subscriptions are open.
func (f *Engine) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

type pipeReader struct {
	r       *io.PipeReader
	onClose func()
	once    sync.Once
}

func (p *pipeReader) Read(b []byte) (int, error) { return p.r.Read(b) }
func (p *pipeReader) Close() error {
	p.once.Do(p.onClose)
	return p.r.Close()
}

// Outside changes the container called name as someone outside Cubicle would (podman
// stop/kill/rm -f/pause/unpause/start): action is "stop", "kill", "remove", "pause",
// "unpause" or "start". The engine's events are sent. Silent changes nothing else.
func (f *Engine) Outside(name, action string, silent bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c *Container
	for _, x := range f.ctrs {
		if x.Spec.Name == name || x.State.ID == name {
			c = x
		}
	}
	if c == nil {
		return fault.NotFound("no container %s", name)
	}
	emit := func(a string) {
		if !silent {
			f.emit(c, a)
		}
	}
	switch action {
	case "stop", "kill":
		c.State.Running, c.State.Paused, c.State.Status = false, false, "exited"
		c.endDriver()
		emit(action)
		emit(engine.ActionDie)
	case "remove":
		c.State.Running, c.State.Paused = false, false
		c.endDriver()
		delete(f.ctrs, c.State.ID)
		emit(engine.ActionDie)
		emit(engine.ActionRemove)
	case "pause":
		c.State.Running, c.State.Paused, c.State.Status = false, true, "paused"
		emit(engine.ActionPause)
	case "unpause":
		c.State.Running, c.State.Paused, c.State.Status = true, false, "running"
		emit(engine.ActionUnpause)
	case "start":
		c.driverDead = false
		c.State.Running, c.State.Paused, c.State.Status, c.State.StartedAt = true, false, "running", time.Now()
		emit(engine.ActionStart)
	default:
		return fault.Invalid("unknown outside action %q", action)
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
	if err := f.hit(ctx, "create"); err != nil {
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
	st := engine.ContainerState{ID: id, Name: spec.Name, Image: spec.Image, Labels: engine.ManagedLabels(spec.Labels), Status: "created"}
	f.ctrs[id] = &Container{Spec: spec, State: st}
	f.emit(f.ctrs[id], engine.ActionCreate)
	return st, nil
}

// Add puts a container the engine "already has" (recovery, compose tests) and returns its id.
func (f *Engine) Add(name string, labels map[string]string, running bool, mounts ...engine.Mount) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("ctr%03d", f.seq)
	status := "exited"
	if running {
		status = "running"
	}
	f.ctrs[id] = &Container{Spec: engine.ContainerSpec{Name: name, Labels: labels, Mounts: mounts},
		State: engine.ContainerState{ID: id, Name: name, Image: "img", Labels: labels, Running: running, Status: status}}
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
	if err := f.hit(ctx, "start"); err != nil {
		return err
	}
	c, err := f.find(id)
	if err != nil {
		return err
	}
	if c.State.Paused {
		return fault.Conflict("container %s is paused", id)
	}
	if !c.State.Running {
		c.driverDead = false // a new PID 1
	}
	c.State.Running, c.State.Status, c.State.StartedAt = true, "running", time.Now()
	f.emit(c, engine.ActionStart)
	return nil
}

// StopContainer marks it stopped and records the timeout.
func (f *Engine) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit(ctx, "stop"); err != nil {
		return err
	}
	c, err := f.find(id)
	if err != nil {
		return err
	}
	f.stopped = append(f.stopped, timeout)
	was := c.State.Running || c.State.Paused
	c.State.Running, c.State.Paused, c.State.Status = false, false, "exited"
	c.endDriver()
	if was {
		f.emit(c, engine.ActionDie)
	}
	if err, ok := f.failAfter["stop"]; ok {
		delete(f.failAfter, "stop")
		return err
	}
	return nil
}

// PauseContainer freezes a running container (fault.ErrConflict when it does not run).
func (f *Engine) PauseContainer(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit(ctx, "pause"); err != nil {
		return err
	}
	c, err := f.find(id)
	if err != nil {
		return err
	}
	if !c.State.Running {
		return fault.Conflict("container %s is %s, not running", id, c.State.Status)
	}
	c.State.Running, c.State.Paused, c.State.Status = false, true, "paused"
	f.emit(c, engine.ActionPause)
	return nil
}

// UnpauseContainer thaws a paused container (fault.ErrConflict when it is not paused).
func (f *Engine) UnpauseContainer(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit(ctx, "unpause"); err != nil {
		return err
	}
	c, err := f.find(id)
	if err != nil {
		return err
	}
	if !c.State.Paused {
		return fault.Conflict("container %s is not paused", id)
	}
	c.State.Running, c.State.Paused, c.State.Status = true, false, "running"
	f.emit(c, engine.ActionUnpause)
	return nil
}

// RemoveContainer deletes it (running only with force).
func (f *Engine) RemoveContainer(ctx context.Context, id string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit(ctx, "remove"); err != nil {
		return err
	}
	c, err := f.find(id)
	if err != nil {
		return err
	}
	if c.State.Running && !force {
		return fault.Conflict("running")
	}
	c.endDriver()
	delete(f.ctrs, c.State.ID)
	f.emit(c, engine.ActionRemove)
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
	if err := f.hit(ctx, "remove-volume"); err != nil {
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

// FailAfterNext makes the next call of op (only "stop") do what it was asked and then return
// err: Podman answers a stop with a 500 when the killed processes are reaped later than it
// waits for, although the container stops.
func (f *Engine) FailAfterNext(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAfter[op] = err
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
