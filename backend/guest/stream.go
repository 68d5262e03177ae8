package guest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// Stream delivers frames as the screen changes. It pulls: each Next asks the driver for the
// first frame newer than the last one delivered, so a slow reader always gets the newest
// screen and never a backlog. Next is not safe for concurrent use; Close is.
type Stream struct {
	c     *Client
	opts  StreamOptions
	after uint64
	last  time.Time

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	once   sync.Once
}

// Stream starts a frame stream. The first Next returns the current screen at once.
func (c *Client) Stream(ctx context.Context, o StreamOptions) (*Stream, error) {
	if o.MaxFPS <= 0 {
		o.MaxFPS = 30
	}
	if o.MaxFPS > 60 {
		return nil, fault.Invalid("desktop driver: stream: max fps %d is above 60", o.MaxFPS)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("desktop driver: stream: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	return &Stream{c: c, opts: o, ctx: sctx, cancel: cancel}, nil
}

// Next returns the next changed frame, waiting for a change and for the fps limit.
func (s *Stream) Next(ctx context.Context) (Frame, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	if s.ctx.Err() != nil {
		return Frame{}, fault.Conflict("desktop driver: stream is closed")
	}
	if !s.last.IsZero() {
		wait := time.Until(s.last.Add(time.Second / time.Duration(s.opts.MaxFPS)))
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return Frame{}, s.ctxErr(ctx)
			case <-t.C:
			}
		}
	}
	// Pace from when the request starts, not from when its frame arrived: capture and
	// encoding take a good part of a frame interval, and counting them twice halves the rate.
	start := time.Now()
	var f Frame
	blob, err := s.c.call(ctx, wire.OpNextFrame, wire.NextFrameArgs{After: s.after, Screenshot: s.opts.ScreenshotOptions}, nil, &f)
	if err != nil {
		if ctx.Err() != nil {
			return Frame{}, s.ctxErr(ctx)
		}
		return Frame{}, err
	}
	f.Data = blob
	s.after, s.last = f.ID, start
	return f, nil
}

func (s *Stream) ctxErr(ctx context.Context) error {
	if s.ctx.Err() != nil {
		return fault.Conflict("desktop driver: stream is closed")
	}
	return fmt.Errorf("desktop driver: stream: %w", ctx.Err())
}

// Close ends the stream; a pending Next returns.
func (s *Stream) Close() error {
	s.once.Do(s.cancel)
	return nil
}

// FrameStream is a stream of changed frames: *Stream, and the host screen's stream of package
// hostdesk. Next is not safe for concurrent use; Close is.
type FrameStream interface {
	Next(ctx context.Context) (Frame, error)
	Close() error
}

// Frames starts a frame stream as a FrameStream (for consumers that take frames from
// several kinds of screens, such as the screen hubs).
func (c *Client) Frames(ctx context.Context, o StreamOptions) (FrameStream, error) {
	s, err := c.Stream(ctx, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}
