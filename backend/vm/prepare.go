package vm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // decode driver screenshots
	_ "image/png"
	"os"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/link"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
	"cubicle/images"
)

// minColours is how many distinct colours a real desktop screenshot has at least; a blank or
// single-colour screen has one or two.
const minColours = 16

type prepJob struct {
	done      chan struct{}
	state     PrepareState // guarded by Manager.mu
	result    store.VMImage
	err       error
	cancel    context.CancelFunc // ends the preparation's context (CancelPrepare)
	cancelled bool               // guarded by Manager.mu
}

// CancelPrepare cancels the running preparation of key: what it started (a probe desktop, a
// build) is stopped and removed, nothing is recorded, and the key stays as it was (an image
// prepared before stays prepared). It returns the preparation's state; a preparation that is
// not running is fault.ErrConflict.
func (m *Manager) CancelPrepare(key string) (PrepareState, error) {
	if _, err := images.ParseKey(key); err != nil {
		return PrepareState{}, err
	}
	m.mu.Lock()
	j, ok := m.preps[key]
	if !ok || !j.state.Running {
		m.mu.Unlock()
		return PrepareState{}, fault.Conflict("no preparation of image %q is running", key)
	}
	j.cancelled = true
	j.cancel()
	m.mu.Unlock()
	<-j.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return j.state, nil
}

// StartPrepare starts preparing key in the background and returns its progress; when a
// preparation of key already runs, it is joined (never run twice).
func (m *Manager) StartPrepare(key string) (PrepareState, error) {
	j, err := m.startPrepare(context.Background(), key)
	if err != nil {
		return PrepareState{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return j.state, nil
}

// Prepare prepares key (joining a running preparation of it) and waits for the result, or
// for ctx (which abandons the wait, not the preparation).
func (m *Manager) Prepare(ctx context.Context, key string) (nodeapi.Image, error) {
	j, err := m.startPrepare(ctx, key)
	if err != nil {
		return nodeapi.Image{}, err
	}
	select {
	case <-j.done:
		if j.err != nil {
			return nodeapi.Image{}, j.err
		}
		return ImageOf(j.result), nil
	case <-ctx.Done():
		return nodeapi.Image{}, ctx.Err()
	}
}

// PrepareStates returns the running and last finished preparation of every key.
func (m *Manager) PrepareStates() []PrepareState {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []PrepareState
	for _, k := range images.Keys() {
		if j, ok := m.preps[string(k)]; ok {
			out = append(out, j.state)
		}
	}
	return out
}

// startPrepare starts (or joins) the preparation of key; ctx bounds only the wait for an
// engine that is still connecting.
func (m *Manager) startPrepare(ctx context.Context, key string) (*prepJob, error) {
	k, err := images.ParseKey(key)
	if err != nil {
		return nil, err
	}
	if len(m.cfg.Compose) > 0 {
		return nil, fault.Conflict("this node runs fixed desktops from compose.desktops.yaml: their images are set by the " +
			"deployment and cannot be prepared here")
	}
	if _, err := m.needEngine(ctx); err != nil {
		return nil, err
	}
	if es := m.engines(); es.images == nil && es.imagesProblem != "" {
		return nil, fault.Unavailable("image preparation is not available: %s", es.imagesProblem)
	}
	if m.engines().images == nil {
		return nil, fault.Unavailable("image preparation is not available: the image builder could not be set up " +
			"(see the Cubicle log); run `cubicle doctor`")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || !m.started {
		return nil, fault.Unavailable("the Local VM manager is not running")
	}
	if j, ok := m.preps[key]; ok && j.state.Running {
		return j, nil
	}
	jctx, cancel := context.WithCancel(m.ctx)
	j := &prepJob{done: make(chan struct{}), cancel: cancel, state: PrepareState{Key: key, Running: true, Phase: "stopping",
		Message: "stopping VM tasks and desktops", Percent: 0, StartedAt: m.clock.Now().UTC()}}
	m.preps[key] = j
	m.preparing++
	first := j.state
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cancel()
		m.prepared(first)
		res, err := m.prepare(jctx, j, k)
		m.mu.Lock()
		m.preparing--
		if err != nil && j.cancelled {
			err = fault.Conflict("the preparation of image %s was cancelled by an administrator; prepare it again when you want it", k)
		}
		j.result, j.err = res, err
		j.state.Running = false
		j.state.FinishedAt = m.clock.Now().UTC()
		switch {
		case err != nil && j.cancelled:
			j.state.Phase, j.state.Error, j.state.Message, j.state.Cancelled = "failed", err.Error(), "preparation cancelled", true
		case err != nil:
			j.state.Phase, j.state.Error, j.state.Message = "failed", err.Error(), "preparation failed"
		default:
			j.state.Phase, j.state.Percent, j.state.Message = "done", 100, "image ready: "+res.Ref
		}
		st := j.state
		m.mu.Unlock()
		close(j.done)
		m.prepared(st)
	}()
	return j, nil
}

func (m *Manager) progress(j *prepJob, phase, msg string, pct float64) {
	m.mu.Lock()
	j.state.Phase, j.state.Message = phase, msg
	if pct >= 0 {
		j.state.Percent = pct
	}
	st := j.state
	m.mu.Unlock()
	m.prepared(st)
}

// prepared tells Config.OnPrepare about a preparation's progress.
func (m *Manager) prepared(st PrepareState) {
	if m.cfg.OnPrepare != nil {
		m.cfg.OnPrepare(st)
	}
}

// prepare is SPEC §1.2: stop tasks and desktops, ensure the image, verify it in a probe
// desktop (driver handshake + a real, non-blank screenshot), record it.
func (m *Manager) prepare(ctx context.Context, j *prepJob, key images.Key) (store.VMImage, error) {
	op := fmt.Sprintf("prepare image %s", key)
	if m.cfg.Activity != nil {
		if err := m.cfg.Activity.StopAll(ctx, "a desktop image is being prepared"); err != nil {
			return store.VMImage{}, fmt.Errorf("%s: stop VM tasks: %w", op, err)
		}
	}
	m.mu.Lock()
	clear(m.busy) // the tasks were stopped and control ended
	m.mu.Unlock()
	for _, in := range m.instancesOrNil() {
		if in.Scope == scopeTask { // its task was stopped above; it is never restarted
			m.progress(j, "stopping", "removing "+m.describe(in), 2)
			unlock := m.lock(in.ID)
			err := m.removeTaskLocked(ctx, in.ID)
			unlock()
			if err != nil {
				return store.VMImage{}, fmt.Errorf("%s: remove %s: %w", op, m.describe(in), err)
			}
			continue
		}
		if in.Scope == scopeCompose || in.ContainerID == "" || in.State == StateAbsent || in.State == StateStopped {
			continue
		}
		m.progress(j, "stopping", "stopping "+m.describe(in), 2)
		if err := m.stopLocked(ctx, in.ID, true); err != nil {
			return store.VMImage{}, fmt.Errorf("%s: stop %s: %w", op, m.describe(in), err)
		}
	}
	m.progress(j, "image", "looking for a compatible image", 5)
	res, err := m.engines().images.Ensure(ctx, key, func(p images.Progress) {
		pct := -1.0
		if p.Percent >= 0 {
			pct = 5 + p.Percent*0.8
		}
		msg := p.Step
		if p.Line != "" {
			msg += ": " + p.Line
		}
		m.progress(j, "image", msg, pct)
	})
	if err != nil {
		return store.VMImage{}, fmt.Errorf("%s: %w", op, err)
	}
	verb := "built"
	if res.Reused {
		verb = "reused"
	}
	m.progress(j, "probe", fmt.Sprintf("%s %s; starting a probe desktop", verb, res.Ref), 86)
	hello, err := m.probe(ctx, j, res.Ref)
	if err != nil {
		return store.VMImage{}, fmt.Errorf("%s: verify %s: %w", op, res.Ref, err)
	}
	img := store.VMImage{NodeID: m.node, Key: string(key), Ref: res.Ref, ImageID: res.ImageID,
		RecipeHash: res.RecipeHash, DriverVersion: hello.Driver, PreparedAt: m.clock.Now().UTC()}
	if err := m.st.PutVMImage(img); err != nil {
		return store.VMImage{}, fmt.Errorf("%s: %w", op, err)
	}
	img.ID = store.VMImageID(m.node, string(key))
	m.log.Info("image prepared", "key", key, "ref", res.Ref, "reused", res.Reused, "driver", hello.Driver)
	return img, nil
}

// removeHalfMadeProbe removes the probe container named name when its create failed after
// the engine made it (a preparation cancelled while the engine was still creating): without
// its id the deferred removal cannot, and it would stay "Created" until this data directory's
// next start. A container of that name that is not this store's probe is left alone.
func (m *Manager) removeHalfMadeProbe(ctx context.Context, eng Engine, name string) {
	// Only a create whose caller left may still be finished by the engine: look again then.
	tries := 1
	if ctx.Err() != nil {
		tries = 3
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for attempt := range tries {
		if attempt > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		c, err := eng.InspectContainer(ctx, name)
		if err != nil {
			continue
		}
		if c.Labels[LabelStore] != m.storeID || c.Labels[LabelRole] != RoleProbe {
			return
		}
		if err := eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			m.log.Error("remove the probe desktop whose create failed", "container", name, "err", err)
		}
		return
	}
}

// probe runs ref in a throw-away desktop, checks the driver's handshake and takes a real
// screenshot that is not blank, then removes the desktop.
func (m *Manager) probe(ctx context.Context, j *prepJob, ref string) (guest.Hello, error) {
	eng, err := m.needEngine(ctx)
	if err != nil {
		return guest.Hello{}, err
	}
	nonce := make([]byte, 4)
	rand.Read(nonce)
	id := "probe-" + hex.EncodeToString(nonce)
	dir, err := m.makeRunDir(id)
	if err != nil {
		return guest.Hello{}, err
	}
	defer os.RemoveAll(dir)
	// The probe is a desktop like any other (the same spec and start), minus the volumes,
	// the record and the capacity slot: every desktop is stopped while an image is prepared.
	ctr, err := eng.CreateContainer(ctx, m.containerSpec(id, "cubicle-"+id, ref, dir, kind{role: RoleProbe}, store.VMInstance{}, nil))
	if err != nil {
		m.removeHalfMadeProbe(ctx, eng, "cubicle-"+id)
		return guest.Hello{}, fmt.Errorf("create probe desktop: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := eng.RemoveContainer(rctx, ctr.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			m.log.Error("remove probe desktop", "container", ctr.ID, "err", err)
		}
	}()
	if err := m.startContainer(ctx, eng, id, ctr.ID); err != nil {
		return guest.Hello{}, fmt.Errorf("start probe desktop: %w", err)
	}
	m.progress(j, "verify", "waiting for the desktop driver", 90)
	rctx, rcancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	g, err := m.links.Open(rctx, link.Target{InstanceID: id, ContainerID: ctr.ID, Socket: m.SocketPath(id)}, true)
	rcancel()
	if err != nil {
		return guest.Hello{}, fault.Unavailable("the image is not usable: the desktop started but its driver did not answer within %s (%v)%s; "+
			"prepare the image again", m.cfg.ReadyTimeout, err, silentDriver(ctx, eng, ctr.ID))
	}
	defer g.Close()
	wctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	hello := g.Hello()
	m.progress(j, "verify", fmt.Sprintf("driver %s answered; taking a screenshot", hello.Driver), 94)
	var last error
	for {
		colours, err := screenColours(wctx, g)
		if err == nil && colours >= minColours {
			m.progress(j, "verify", fmt.Sprintf("real screenshot taken (%d+ colours)", colours), 98)
			return hello, nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("the screen is blank (%d colours)", colours)
		}
		select {
		case <-wctx.Done():
			return guest.Hello{}, fault.Unavailable("no real screenshot within %s: %v", m.cfg.ReadyTimeout, last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// screenColours takes a PNG screenshot and counts its distinct colours (up to minColours).
func screenColours(ctx context.Context, g *guest.Client) (int, error) {
	f, err := g.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
	if err != nil {
		return 0, err
	}
	img, _, err := image.Decode(bytes.NewReader(f.Data))
	if err != nil {
		return 0, fmt.Errorf("decode screenshot: %w", err)
	}
	return distinctColours(img, minColours), nil
}

// distinctColours counts the distinct colours of img, stopping at limit.
func distinctColours(img image.Image, limit int) int {
	seen := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[(r>>8)<<16|(g>>8)<<8|bl>>8] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}
