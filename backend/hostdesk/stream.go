package hostdesk

import (
	"context"
	"hash/fnv"
	"image"
	"sync"
	"time"

	"github.com/kbinani/screenshot"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// The host screen's live stream (the computer panel of a "host" computer) polls captures of
// the primary display, compares each with the last one sent and sends only changes, so an
// idle screen costs its viewers nothing. kbinani/screenshot opens a connection per capture
// (about 40 ms for 1280x800 on X11), so the stream is capped well below the desktops' 30 fps.

// MaxHostFPS caps the host screen's stream.
const MaxHostFPS = 5

// Frames implements screen.Source: a stream of the primary display's changed frames.
func (d *Desktop) Frames(ctx context.Context, o guest.StreamOptions) (guest.FrameStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p := permission(); !p.Granted {
		return nil, fault.Unavailable("the host's screen cannot be shown: %s; %s", p.Missing, p.HowToGrant)
	}
	fps := o.MaxFPS
	if fps <= 0 || fps > MaxHostFPS {
		fps = MaxHostFPS
	}
	sctx, cancel := context.WithCancel(context.Background())
	return &hostStream{d: d, opts: o.ScreenshotOptions, gap: time.Second / time.Duration(fps), ctx: sctx, cancel: cancel}, nil
}

// hostStream is one viewer hub's stream of the host screen.
type hostStream struct {
	d    *Desktop
	opts guest.ScreenshotOptions
	gap  time.Duration

	last time.Time // start of the last capture
	sum  uint64    // hash of the last frame sent
	sent bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	once   sync.Once
}

// Next returns the next changed frame of the primary display; the first call returns the
// current screen.
func (s *hostStream) Next(ctx context.Context) (guest.Frame, error) {
	for {
		if wait := time.Until(s.last.Add(s.gap)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return guest.Frame{}, ctx.Err()
			case <-s.ctx.Done():
				t.Stop()
				return guest.Frame{}, fault.Conflict("host screen: stream is closed")
			case <-t.C:
			}
		}
		if s.ctx.Err() != nil {
			return guest.Frame{}, fault.Conflict("host screen: stream is closed")
		}
		if err := ctx.Err(); err != nil {
			return guest.Frame{}, err
		}
		s.last = time.Now()
		r := screenshot.GetDisplayBounds(0)
		if r.Empty() {
			return guest.Frame{}, fault.Unavailable("host screen: no display to capture")
		}
		img, err := screenshot.CaptureRect(image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Max.Y))
		if err != nil {
			return guest.Frame{}, fault.Unavailable("host screen: capture: %v", err)
		}
		h := fnv.New64a()
		h.Write(img.Pix)
		sum := h.Sum64()
		if s.sent && sum == s.sum {
			continue // unchanged: nothing to send
		}
		s.d.genMu.Lock()
		s.d.gen++
		id := s.d.gen
		s.d.genMu.Unlock()
		f, err := encode(img, s.opts, id)
		if err != nil {
			return guest.Frame{}, err
		}
		s.sum, s.sent = sum, true
		return f, nil
	}
}

// Close ends the stream; a pending Next returns.
func (s *hostStream) Close() error {
	s.once.Do(s.cancel)
	return nil
}
