package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	_ "image/png" // screenshots are decoded to tell a drawn desktop from a blank one
	"path/filepath"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/images/guest/wire"
)

// Labels and names: everything a run creates is recognisable and removable.
const (
	// NamePrefix starts the name of the run's scratch directory.
	NamePrefix = "cubicle-bench-"
	// LabelRun carries the run's id on every container and volume the run creates.
	LabelRun = wire.LabelBenchRun
	// minColours: a drawn desktop has at least this many distinct colours (as the image
	// preparation's probe checks); a blank or half-drawn screen has fewer.
	minColours = 16
	// benchAccount owns the run's desktops in its scratch data file.
	benchAccount = "bench"
)

// The benchmark's desktops are the product's: a vm.Manager over a scratch data file in the
// run's directory (node "bench-<run>", the run's label on every container and volume), whose
// prepared "standard" image is the peers image. A cold start is vm.Manager.Act(create) of a
// new agent — image, capacity slot, volumes, hardened container, start, driver handshake —
// exactly what a person's first create does; stop and restart are Act(stop) and Act(start).

// desktop is one benchmark desktop and its driver connection.
type desktop struct {
	agent    string        // the scratch agent whose desktop it is
	instance string        // the vm instance id
	id, name string        // the container (name; engines accept it where an id goes)
	client   *guest.Client // nil while stopped
}

// fleet is the run's vm.Manager and its scratch store.
type fleet struct {
	st *store.Store
	m  *vm.Manager
	n  int // agents made so far
}

// newID returns a short random hex id.
func newID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// startFleet opens the scratch store, records image as its prepared standard image and
// starts the manager (idle stop off: the run decides when its desktops stop).
func (r *runner) startFleet(ctx context.Context, image, imageID string) error {
	st, err := store.Open(filepath.Join(r.runRoot, "desktops.db"), store.Options{Logger: r.log, KeepBackups: -1})
	if err != nil {
		return err
	}
	node := "bench-" + r.id
	if err := st.CreateAccount(store.Account{ID: benchAccount, Username: benchAccount, Role: store.RoleAdmin}); err != nil {
		st.Close()
		return err
	}
	if err := st.PutVMImage(store.VMImage{NodeID: node, Key: "standard", Ref: image, ImageID: imageID,
		PreparedAt: time.Now().UTC()}); err != nil {
		st.Close()
		return err
	}
	m, err := vm.New(vm.Config{Store: st, Engine: r.cfg.Engine, NodeID: node, DataDir: r.runRoot, Logger: r.log,
		ReadyTimeout: r.cfg.ReadyTimeout, ExtraLabels: map[string]string{LabelRun: r.id}, Link: link.Config{Choice: r.cfg.GuestLink}})
	if err != nil {
		st.Close()
		return err
	}
	if err := m.Start(ctx); err != nil {
		st.Close()
		return err
	}
	if _, err := m.SetIdlePolicy(ctx, "bench", 0, nil); err != nil {
		m.Close()
		st.Close()
		return err
	}
	r.fleet = &fleet{st: st, m: m}
	return nil
}

// closeFleet stops the manager (it stops the run's running desktops) and closes the store.
func (r *runner) closeFleet() error {
	if r.fleet == nil {
		return nil
	}
	err := errors.Join(r.fleet.m.Close(), r.fleet.st.Close())
	r.fleet = nil
	return err
}

// coldStart brings up the desktop of a new agent through the product's create: a new
// container with new volumes, driver ready. The caller then waits for the first drawn
// screen.
func (r *runner) coldStart(ctx context.Context) (*desktop, error) {
	f := r.fleet
	f.n++
	agent := fmt.Sprintf("bench-%d", f.n)
	if err := f.st.CreateAgent(store.Agent{ID: agent, AccountID: benchAccount, Name: agent, Computer: "vm",
		CreatedAt: time.Now().UTC()}); err != nil {
		return nil, err
	}
	d := &desktop{agent: agent}
	r.track(d)
	if err := r.act(ctx, d, vm.ActionCreate); err != nil {
		return nil, err
	}
	return d, nil
}

// act runs a lifecycle action on d's desktop and takes its driver link (the manager's, as
// the app's tools and screen use it) when it runs.
func (r *runner) act(ctx context.Context, d *desktop, action string) error {
	d.client = nil // the manager closes the link of a desktop that stops
	v, err := r.fleet.m.Act(ctx, benchAccount, d.agent, action)
	if err != nil {
		return fmt.Errorf("bench: %s desktop %s: %w", action, d.agent, err)
	}
	d.instance, d.name, d.id = v.Desktop.ID, v.Desktop.Container, v.Desktop.Container
	if v.Desktop.State != vm.StateRunning {
		return nil
	}
	c, err := r.fleet.m.Link(ctx, d.instance)
	if err != nil {
		return fmt.Errorf("bench: desktop %s: %w", d.name, err)
	}
	d.client = c
	return nil
}

// start starts d's stopped desktop (the product's start) and connects to its driver.
func (r *runner) start(ctx context.Context, d *desktop) error { return r.act(ctx, d, vm.ActionStart) }

// stop stops d's desktop (the product's stop: SIGTERM to the driver, then the grace period).
func (r *runner) stop(ctx context.Context, d *desktop) error { return r.act(ctx, d, vm.ActionStop) }

// firstRealScreenshot takes PNG screenshots until one shows a drawn desktop.
func (r *runner) firstRealScreenshot(ctx context.Context, d *desktop) error {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.ReadyTimeout)
	defer cancel()
	var last error
	for {
		f, err := d.client.Screenshot(wctx, guest.ScreenshotOptions{Format: "png"})
		if err == nil {
			var n int
			if n, err = colours(f.Data, minColours); err == nil && n >= minColours {
				return nil
			} else if err == nil {
				err = fmt.Errorf("the screen is still blank (%d colours)", n)
			}
		}
		last = err
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fault.Unavailable("bench: desktop %s showed no drawn screen within %s: %v", d.name, r.cfg.ReadyTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// colours decodes an image and counts its distinct colours, stopping at limit.
func colours(data []byte, limit int) (int, error) {
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return 0, fmt.Errorf("decode screenshot: %w", err)
	}
	seen := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			seen[(cr>>8)<<16|(cg>>8)<<8|cb>>8] = true
			if len(seen) >= limit {
				return len(seen), nil
			}
		}
	}
	return len(seen), nil
}

// remove removes d's container (the product's remove; its volumes go at the run's end). It
// runs during clean-up too, so it is not bound by the run's context.
func (r *runner) remove(d *desktop) error {
	d.client = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.fleet.m.Act(ctx, benchAccount, d.agent, vm.ActionRemove)
	r.untrack(d)
	if err != nil {
		return fmt.Errorf("bench: remove desktop %s: %w", d.name, err)
	}
	return nil
}
