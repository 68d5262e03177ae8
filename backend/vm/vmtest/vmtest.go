// Package vmtest holds in-memory stand-ins for the desktop manager's dependencies: a container
// engine whose containers run fake drivers speaking the real protocol (driver.go) or the
// commands they were created with (proc.go), an image builder, a manual clock and an
// activity hook. They let tests of vm and of its consumers (the API) run the real manager
// logic without an engine. The fake engine passes the engines' conformance suite
// (enginetest.RunContainers, conformance_test.go), so what unit tests see of it — states,
// error classes, events, a start that fails at once, volumes, exec sessions — is what real
// engines do; real-engine tests cover the same paths against Podman.
package vmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// Engine is an in-memory container engine (it satisfies vm.Engine and the container part of
// enginetest.Engine). Safe for concurrent use. Close removes the files its containers wrote.
type Engine struct {
	mu     sync.Mutex
	seq    int
	pids   int                   // the last process id given
	ctrs   map[string]*Container // by id
	vols   map[string]engine.Volume
	calls  []string
	failOn map[string]error // method name → error to return once
	// failAfter: method name → error to return once after doing what was asked (StopContainer
	// only: an engine that reports a stop as failed although the container stopped)
	failAfter map[string]error
	stopped   []time.Duration // timeouts of StopContainer calls
	blank     bool            // the fake drivers' screens are one colour
	subs      map[*subscriber]bool
	block     map[string]chan struct{} // method name → gate the call waits on
	// dir holds the containers' root directories and the volumes' files; made by the first
	// process that runs (proc.go), removed by Close.
	dir string
}

// Container is one container of the fake engine.
type Container struct {
	Spec  engine.ContainerSpec
	State engine.ContainerState

	driverDead bool       // KillDriver until the next start
	conns      []net.Conn // the driver's open connections

	root  string         // the directory standing for its root file system (proc.go)
	pid1  *proc          // the Command's process while it runs; nil for the image's own (the fake driver)
	execs map[*proc]bool // exec sessions running commands (not the driver's relay)
	logs  *logTail       // the main process's output
}

// NewEngine returns an empty engine.
func NewEngine() *Engine {
	return &Engine{ctrs: map[string]*Container{}, vols: map[string]engine.Volume{}, failOn: map[string]error{}, failAfter: map[string]error{},
		subs: map[*subscriber]bool{}, block: map[string]chan struct{}{}}
}

// Close ends every process and event subscription and removes the engine's files.
func (f *Engine) Close() error {
	f.mu.Lock()
	var procs []*proc
	for _, c := range f.ctrs {
		procs = append(procs, c.procs()...)
		c.endDriver()
	}
	for s := range f.subs {
		s.end(io.EOF)
		delete(f.subs, s)
	}
	dir := f.dir
	f.mu.Unlock()
	for _, p := range procs {
		p.kill()
		<-p.done
	}
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}

// procs returns c's running processes; f.mu is held.
func (c *Container) procs() []*proc {
	var out []*proc
	if c.pid1 != nil {
		out = append(out, c.pid1)
	}
	for p := range c.execs {
		out = append(out, p)
	}
	return out
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

// subscriber is one event subscription: events are written to its pipe in the order they
// happened, by its own goroutine (a pipe write blocks until read; never under f.mu).
type subscriber struct {
	w     *io.PipeWriter
	mu    sync.Mutex
	queue [][]byte      // guarded by mu
	more  chan struct{} // one slot: the queue has lines
	done  chan struct{} // closed by end
	once  sync.Once
}

func newSubscriber(w *io.PipeWriter) *subscriber {
	s := &subscriber{w: w, more: make(chan struct{}, 1), done: make(chan struct{})}
	go s.loop() // owned: ends with end
	return s
}

func (s *subscriber) push(line []byte) {
	s.mu.Lock()
	s.queue = append(s.queue, line)
	s.mu.Unlock()
	select {
	case s.more <- struct{}{}:
	default:
	}
}

func (s *subscriber) loop() {
	for {
		select {
		case <-s.more:
		case <-s.done:
			return
		}
		for {
			s.mu.Lock()
			if len(s.queue) == 0 {
				s.mu.Unlock()
				break
			}
			line := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			if _, err := s.w.Write(line); err != nil {
				return
			}
		}
	}
}

// end closes the subscription's pipe with err (io.EOF: a plain close).
func (s *subscriber) end(err error) {
	s.once.Do(func() {
		close(s.done)
		s.w.CloseWithError(err)
	})
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
	for s := range f.subs {
		s.push(line)
	}
}

// Events subscribes to the fake engine's container events (the same JSON lines a real engine
// sends, read by engine.NewEventStream), in the order they happened.
func (f *Engine) Events(ctx context.Context, labels map[string]string) (*engine.EventStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit(ctx, "events"); err != nil {
		return nil, err
	}
	r, w := io.Pipe()
	s := newSubscriber(w)
	f.subs[s] = true
	unsubscribe := func(err error) {
		f.mu.Lock()
		delete(f.subs, s)
		f.mu.Unlock()
		s.end(err)
	}
	go func() { // ends with the subscription
		select {
		case <-ctx.Done():
			unsubscribe(ctx.Err())
		case <-s.done:
		}
	}()
	return engine.NewEventStream(&pipeReader{r: r, onClose: func() { unsubscribe(io.EOF) }}, labels), nil
}

// EndEvents ends every subscription as a restarting engine would.
func (f *Engine) EndEvents() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		s.end(io.ErrUnexpectedEOF)
		delete(f.subs, s)
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
		f.end(c, 137)
		emit(action)
		emit(engine.ActionDie)
	case "remove":
		f.end(c, 137)
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
		f.pids++
		c.State.Running, c.State.Paused, c.State.Status, c.State.StartedAt, c.State.PID = true, false, "running", time.Now(), f.pids
		emit(engine.ActionStart)
	default:
		return fault.Invalid("unknown outside action %q", action)
	}
	return nil
}

// Info describes a fake Podman on this machine's architecture.
func (f *Engine) Info(ctx context.Context) (engine.Info, error) {
	return engine.Info{Kind: engine.Podman, Version: "fake", APIVersion: "fake", Socket: "unix:///fake",
		OS: "linux", Arch: runtime.GOARCH}, nil
}

// CreateContainer stores the spec: a taken name is fault.ErrExists; no image, or a bind
// mount target that is not absolute, fault.ErrInvalid; a volume that does not exist
// fault.ErrNotFound (real engines would make it, without Cubicle's labels: the fake is
// stricter, so that a caller that forgets EnsureVolume is caught).
func (f *Engine) CreateContainer(ctx context.Context, spec engine.ContainerSpec) (engine.ContainerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.hit(ctx, "create"); err != nil {
		return engine.ContainerState{}, err
	}
	if spec.Image == "" {
		return engine.ContainerState{}, fault.Invalid("create container %s: no image", spec.Name)
	}
	for _, m := range spec.Mounts {
		if !path.IsAbs(m.Target) {
			return engine.ContainerState{}, fault.Invalid("create container %s: mount target %q is not an absolute path", spec.Name, m.Target)
		}
	}
	for _, c := range f.ctrs {
		if c.Spec.Name == spec.Name {
			return engine.ContainerState{}, fault.Exists("container name %q in use", spec.Name)
		}
	}
	for _, v := range spec.Volumes {
		if _, ok := f.vols[v.Name]; !ok {
			return engine.ContainerState{}, fault.NotFound("volume %s missing", v.Name)
		}
	}
	f.seq++
	id := fmt.Sprintf("ctr%03d", f.seq)
	st := engine.ContainerState{ID: id, Name: spec.Name, Image: spec.Image, Labels: engine.ManagedLabels(spec.Labels), Status: "created"}
	f.ctrs[id] = &Container{Spec: spec, State: st, execs: map[*proc]bool{}, logs: &logTail{}}
	f.emit(f.ctrs[id], engine.ActionCreate)
	if err, ok := f.failAfter["create"]; ok {
		delete(f.failAfter, "create")
		return engine.ContainerState{}, err
	}
	return st, nil
}

// Add puts a container the engine "already has" (recovery, compose tests) and returns its id.
func (f *Engine) Add(name string, labels map[string]string, running bool, mounts ...engine.Mount) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("ctr%03d", f.seq)
	status, pid := "exited", 0
	if running {
		f.pids++
		status, pid = "running", f.pids
	}
	f.ctrs[id] = &Container{Spec: engine.ContainerSpec{Name: name, Image: "img", Labels: labels, Mounts: mounts},
		State: engine.ContainerState{ID: id, Name: name, Image: "img", Labels: labels, Running: running, Status: status, PID: pid},
		execs: map[*proc]bool{}, logs: &logTail{}}
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

// StartContainer starts the container's process: the fake driver, or its Command (proc.go).
// A running container is left as it is; a paused one is fault.ErrConflict. A Command that
// fails within engine.StartConfirm makes the start fail (fault.ErrUnavailable with its exit
// code and last output), as on real engines.
func (f *Engine) StartContainer(ctx context.Context, id string) error {
	f.mu.Lock()
	if err := f.hit(ctx, "start"); err != nil {
		f.mu.Unlock()
		return err
	}
	c, err := f.find(id)
	if err != nil {
		f.mu.Unlock()
		return err
	}
	if c.State.Paused {
		f.mu.Unlock()
		return fault.Conflict("container %s is paused", id)
	}
	if c.State.Running {
		f.mu.Unlock()
		return nil
	}
	c.driverDead = false // a new PID 1
	command := len(c.Spec.Command) > 0
	if command {
		p, err := f.startProc(c, c.Spec.Command, nil, "", "/", nil, c.logs, c.logs, nil, func(p *proc) { f.mainEnded(c, p) })
		if err != nil {
			f.mu.Unlock()
			return fault.Unavailable("start container %s: %v", id, err)
		}
		c.pid1 = p
		c.State.PID = p.pid
	} else {
		f.pids++
		c.State.PID = f.pids
	}
	c.State.Running, c.State.Status, c.State.StartedAt, c.State.ExitCode = true, "running", time.Now(), 0
	f.emit(c, engine.ActionStart)
	f.mu.Unlock()
	if !command {
		return nil // the fake driver runs until it is stopped
	}
	return engine.ConfirmStart(ctx, "start container "+id, 0,
		func(ctx context.Context) (engine.ContainerState, error) { return f.InspectContainer(ctx, c.State.ID) },
		func(context.Context) string { return c.logs.last(engine.LogTail) })
}

// mainEnded records the end of c's main process p (unless a stop or remove already did).
func (f *Engine) mainEnded(c *Container, p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.pid1 != p {
		return
	}
	if f.end(c, p.code) {
		f.emit(c, engine.ActionDie)
	}
}

// end records that c's main process ended with code: its processes, exec sessions and driver
// links end. It reports whether c ran (the caller sends the die event). f.mu is held.
func (f *Engine) end(c *Container, code int) (was bool) {
	was = c.State.Running || c.State.Paused
	if c.pid1 != nil {
		c.pid1.kill()
		c.pid1 = nil
	}
	for p := range c.execs {
		p.kill()
	}
	c.endDriver()
	if was {
		c.State.Running, c.State.Paused, c.State.Status, c.State.ExitCode, c.State.PID = false, false, "exited", code, 0
	}
	return was
}

// StopContainer stops a running or paused container and records the timeout. The fake
// driver ends at once; a Command's process, which as PID 1 ignores SIGTERM, is killed when
// the timeout (0: the spec's StopTimeout, else 10 s) has passed, or at once when paused.
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
	if p := c.pid1; p != nil {
		if c.State.Running {
			if timeout <= 0 {
				timeout = c.Spec.StopTimeout
			}
			if timeout <= 0 {
				timeout = 10 * time.Second
			}
			f.mu.Unlock()
			select {
			case <-p.done:
			case <-time.After(timeout):
			case <-ctx.Done():
			}
			f.mu.Lock()
		}
		if c.pid1 == p && f.end(c, 137) {
			f.emit(c, engine.ActionDie)
		}
		f.mu.Unlock()
		<-p.done // killed: its files are closed when the stop returns
		f.mu.Lock()
	} else if f.end(c, 0) {
		f.emit(c, engine.ActionDie)
	}
	if err, ok := f.failAfter["stop"]; ok {
		delete(f.failAfter, "stop")
		return err
	}
	return nil
}

// PauseContainer freezes a running container (fault.ErrConflict when it does not run). A
// Command's processes are not frozen (proc.go).
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

// RemoveContainer deletes it: a running or paused one only with force (it is killed first,
// with its die event), else fault.ErrConflict.
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
	if (c.State.Running || c.State.Paused) && !force {
		return fault.Conflict("container %s is %s: stop it first", id, c.State.Status)
	}
	if f.end(c, 137) {
		f.emit(c, engine.ActionDie)
	}
	delete(f.ctrs, c.State.ID)
	f.emit(c, engine.ActionRemove)
	if c.root != "" {
		os.RemoveAll(c.root)
	}
	return nil
}

// InspectContainer returns its state, with its bind mounts and volumes.
func (f *Engine) InspectContainer(ctx context.Context, id string) (engine.ContainerState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.find(id)
	if err != nil {
		return engine.ContainerState{}, err
	}
	st := c.State
	st.Mounts = slices.Clone(c.Spec.Mounts)
	st.Volumes = slices.Clone(c.Spec.Volumes)
	return st, nil
}

// LastOutput is the last engine.LogTail lines container id's main process wrote ("" for an
// unknown container).
func (f *Engine) LastOutput(ctx context.Context, id string) string {
	f.mu.Lock()
	c, err := f.find(id)
	f.mu.Unlock()
	if err != nil {
		return ""
	}
	return c.logs.last(engine.LogTail)
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

// EnsureVolume creates a volume once, with Cubicle's managed label.
func (f *Engine) EnsureVolume(ctx context.Context, name string, labels map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vols[name]; !ok {
		f.vols[name] = engine.Volume{Name: name, Labels: engine.ManagedLabels(labels), CreatedAt: time.Now()}
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
	if f.dir != "" {
		os.RemoveAll(f.volumeDir(name))
	}
	return nil
}

// ListVolumes returns the names of the volumes carrying all of labels, sorted.
func (f *Engine) ListVolumes(ctx context.Context, labels map[string]string) ([]string, error) {
	vs, err := f.Volumes(ctx, labels)
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out, err
}

// Volumes returns the volumes carrying all of labels, sorted by name.
func (f *Engine) Volumes(ctx context.Context, labels map[string]string) ([]engine.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []engine.Volume
	for _, v := range f.vols {
		if engine.MatchLabels(v.Labels, labels) {
			v.Labels = engine.ManagedLabels(v.Labels) // a copy
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// VolumeSizes says every volume (of names; all when empty) holds VolumeSize bytes plus
// what its containers wrote into it.
func (f *Engine) VolumeSizes(ctx context.Context, names []string) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	for v := range f.vols {
		if len(names) == 0 || slices.Contains(names, v) {
			out[v] = VolumeSize
			if f.dir != "" {
				if n, ok := engine.LocalDirSize(ctx, f.volumeDir(v)); ok {
					out[v] += n
				}
			}
		}
	}
	return out, nil
}

// VolumeSize is the size the fake engine reports for an empty volume.
const VolumeSize = 5 << 20

// ContainerStats reports fixed numbers for a running container (12.5 % CPU, 100 MiB, 42
// processes) and its memory limit (3 GiB without one); fault.ErrConflict when it does not run.
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
	limit := uint64(3 << 30)
	if m := c.Spec.Limits.MemoryBytes; m > 0 {
		limit = uint64(m)
	}
	return engine.Stats{CPUPercent: 12.5, MemoryBytes: 100 << 20, MemoryLimit: limit, PIDs: 42}, nil
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

// FailNext makes the next call of op ("create", "start", "stop", "remove") fail with err.
func (f *Engine) FailNext(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failOn[op] = err
}

// FailAfterNext makes the next call of op ("stop" or "create") do what it was asked and then
// return err: Podman answers a stop with a 500 when the killed processes are reaped later than
// it waits for, although the container stops; a create whose caller gave up (its context
// ended) can still be completed by the engine.
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

// VolumeNames returns the names of the volumes, sorted.
func (f *Engine) VolumeNames() []string {
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
