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
	"os"
	"path/filepath"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/images/guest/wire"
)

// Container names and labels: everything a run creates is recognisable and removable.
const (
	// NamePrefix starts the name of every container a run creates.
	NamePrefix = "cubicle-bench-"
	// LabelRun carries the run's id on every container the run creates.
	LabelRun = wire.LabelBenchRun
	// runDirTarget is where the driver expects its run directory (images' contract).
	runDirTarget = wire.RunDir
	// socketName is the driver's socket in the run directory.
	socketName = wire.SocketName
	// minColours: a drawn desktop has at least this many distinct colours (as the image
	// preparation's probe checks); a blank or half-drawn screen has fewer.
	minColours = 16
)

// desktop is one benchmark container and its driver connection.
type desktop struct {
	id, name string
	runDir   string
	client   *guest.Client // nil while stopped
}

// newID returns a short random hex id.
func newID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// create creates (not starts) a desktop container of image with the hardening and limits the
// app's own desktops get (backend/vm), a run directory for the driver's socket, and the run's
// labels.
func (r *runner) create(ctx context.Context, image string) (*desktop, error) {
	name := NamePrefix + r.id + "-" + newID()
	dir := filepath.Join(r.runRoot, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fault.Unavailable("bench: create the run directory %s: %v", dir, err)
	}
	os.Chmod(dir, 0o777) // the driver runs as uid 1000 and creates its socket here
	st, err := r.cfg.Engine.CreateContainer(ctx, engine.ContainerSpec{
		Name:     name,
		Image:    image,
		Labels:   map[string]string{LabelRun: r.id},
		Env:      map[string]string{wire.EnvRunDir: runDirTarget},
		Hostname: "cubicle",
		Mounts:   []engine.Mount{{Source: dir, Target: runDirTarget}},
		Limits: engine.Limits{
			MemoryBytes: 3 << 30, NanoCPUs: 2e9, PIDs: 4096, ShmBytes: 512 << 20,
			NoFile: 20000, NProc: 32768,
		},
		StopTimeout: 5 * time.Second,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: create desktop %s: %w", name, err)
	}
	d := &desktop{id: st.ID, name: name, runDir: dir}
	r.track(d)
	return d, nil
}

// start starts d's container and waits for its driver.
func (r *runner) start(ctx context.Context, d *desktop) error {
	// A socket file left by the previous run of the driver would answer nothing.
	os.Remove(filepath.Join(d.runDir, socketName))
	if err := r.cfg.Engine.StartContainer(ctx, d.id); err != nil {
		return fmt.Errorf("bench: start desktop %s: %w", d.name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.ReadyTimeout)
	defer cancel()
	c, err := guest.WaitReady(wctx, filepath.Join(d.runDir, socketName))
	if err != nil {
		return fmt.Errorf("bench: desktop %s: %w", d.name, err)
	}
	d.client = c
	return nil
}

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

// stop closes the driver connection and stops the container (the driver ends the session
// on SIGTERM; the engine kills after the grace period).
func (r *runner) stop(ctx context.Context, d *desktop) error {
	if d.client != nil {
		d.client.Close()
		d.client = nil
	}
	if err := r.cfg.Engine.StopContainer(ctx, d.id, 5*time.Second); err != nil {
		return fmt.Errorf("bench: stop desktop %s: %w", d.name, err)
	}
	return nil
}

// remove removes d (force: running or not) and its run directory; it runs during clean-up,
// so it is not bound by the run's context.
func (r *runner) remove(d *desktop) error {
	if d.client != nil {
		d.client.Close()
		d.client = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := r.cfg.Engine.RemoveContainer(ctx, d.id, true)
	if errors.Is(err, fault.ErrNotFound) {
		err = nil
	}
	os.RemoveAll(d.runDir)
	r.untrack(d)
	if err != nil {
		return fmt.Errorf("bench: remove desktop %s: %w", d.name, err)
	}
	return nil
}
