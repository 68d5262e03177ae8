//go:build linux

package main

import (
	"context"
	"errors"

	"cubicle/images/guest/wire"
	"cubicle/images/guest/x11"
)

// clipboardGet reads a selection of the desktop.
func (s *screen) clipboardGet(ctx context.Context, a wire.ClipboardArgs) (wire.Clipboard, error) {
	d, _, err := s.get(ctx)
	if err != nil {
		return wire.Clipboard{}, err
	}
	c, err := d.Clipboard(ctx, a.Selection, a.Mime)
	if err != nil {
		return wire.Clipboard{}, clipboardError(err)
	}
	return wire.Clipboard{Mime: c.Mime, Size: len(c.Data), Data: c.Data}, nil
}

// clipboardSet makes the driver own the selections with the blob as content.
func (s *screen) clipboardSet(ctx context.Context, a wire.ClipboardArgs, data []byte) error {
	d, _, err := s.get(ctx)
	if err != nil {
		return err
	}
	return clipboardError(d.SetClipboard(a.Selections, a.Mime, data))
}

// nextClipboard waits for a selection change after a.After (ids carry the X connection's
// epoch, so a change on a new connection is always newer).
func (s *screen) nextClipboard(ctx context.Context, a wire.ClipboardWaitArgs) (wire.ClipboardChange, error) {
	for {
		d, ep, err := s.get(ctx)
		if err != nil {
			return wire.ClipboardChange{}, err
		}
		after := uint64(0)
		if a.After>>epochShift == ep {
			after = a.After & (1<<epochShift - 1)
		} else if a.After>>epochShift > ep {
			return wire.ClipboardChange{}, wire.Invalid("next_clipboard: after %d is from the future", a.After)
		}
		cur, _ := d.ClipboardState()
		if a.After == 0 || (after == 0 && a.After>>epochShift != ep) {
			// The host's first call, or a new X connection since its last change: report
			// where it stands at once.
			return wire.ClipboardChange{Gen: frameID(ep, cur.Gen), Selection: cur.Selection, Own: cur.Own}, nil
		}
		ch, err := d.WaitClipboard(ctx, after)
		if errors.Is(err, x11.ErrClosed) {
			continue // the display was replaced (resize, X restart): look again
		}
		if err != nil {
			return wire.ClipboardChange{}, err
		}
		return wire.ClipboardChange{Gen: frameID(ep, ch.Gen), Selection: ch.Selection, Own: ch.Own}, nil
	}
}

func clipboardError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, x11.ErrNoClipboard):
		return wire.NotFound("the desktop's clipboard is empty (or holds nothing as text or PNG)")
	case errors.Is(err, x11.ErrClipboardTooLarge):
		return wire.Invalid("clipboard content is over the %d MiB limit", wire.MaxClipboard>>20)
	case errors.Is(err, x11.ErrClosed):
		return unavailable(err)
	}
	return wire.Invalid("%v", err)
}

// resize changes the screen size with RandR and replaces the display connection, so captures,
// streams (a keyframe at the new size follows) and input use the new size. Selections the
// driver owned move to the new connection.
func (s *screen) resize(ctx context.Context, a wire.ResizeArgs) (wire.Size, error) {
	w, h := a.Width&^1, a.Height&^1
	d, _, err := s.get(ctx)
	if err != nil {
		return wire.Size{}, err
	}
	if cw, ch := d.Size(); cw == w && ch == h {
		return wire.Size{Width: w, Height: h}, nil
	}
	maxW, maxH, err := d.SizeRange()
	if err != nil {
		return wire.Size{}, wire.Invalid("this desktop cannot be resized: %v", err)
	}
	if w < wire.MinScreenWidth || h < wire.MinScreenHeight || w > maxW || h > maxH {
		return wire.Size{}, wire.Invalid("screen size %dx%d is outside %dx%d…%dx%d", a.Width, a.Height,
			wire.MinScreenWidth, wire.MinScreenHeight, maxW, maxH)
	}
	s.resizeMu.Lock()
	defer s.resizeMu.Unlock()
	if err := d.Resize(w, h); err != nil {
		return wire.Size{}, unavailable(err)
	}
	nd, err := x11.Open(s.display)
	if err != nil {
		return wire.Size{}, wire.Unavailable("resized, but reconnecting to the display failed: %v", err)
	}
	nd.AdoptClipboard(d)
	s.set(nd)
	s.log.Info("screen resized", "width", w, "height", h)
	nw, nh := nd.Size()
	return wire.Size{Width: nw, Height: nh}, nil
}
