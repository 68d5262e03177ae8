package guest

import (
	"context"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// The clipboard and resize vocabulary (see package wire for the fields).
type (
	ClipboardArgs     = wire.ClipboardArgs
	Clipboard         = wire.Clipboard
	ClipboardWaitArgs = wire.ClipboardWaitArgs
	ClipboardChange   = wire.ClipboardChange
	ResizeArgs        = wire.ResizeArgs
)

// Hello.Features of a driver with the clipboard operations and with resize; limits and types.
const (
	FeatureClipboard = wire.FeatureClipboard
	FeatureResize    = wire.FeatureResize
	MaxClipboard     = wire.MaxClipboard
	MimeText         = wire.MimeText
	MimePNG          = wire.MimePNG
)

// Has reports whether the driver offers an optional feature (Hello.Features).
func (c *Client) Has(feature string) bool {
	for _, f := range c.hello.Features {
		if f == feature {
			return true
		}
	}
	return false
}

// ClipboardGet reads a selection of the desktop ("clipboard" or "primary"); mime "" takes
// text when offered, else a PNG. An empty clipboard is fault.ErrNotFound.
func (c *Client) ClipboardGet(ctx context.Context, selection, mime string) (Clipboard, error) {
	if !c.Has(FeatureClipboard) {
		return Clipboard{}, fault.Conflict("this desktop's driver has no clipboard; prepare the desktop image again")
	}
	var r Clipboard
	blob, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpClipboardGet, wire.ClipboardArgs{Selection: selection, Mime: mime}, nil, &r)
	if blob == nil {
		blob = []byte{}
	}
	r.Data = blob
	return r, err
}

// ClipboardSet puts data of mime (MimeText or MimePNG) on the desktop's selections
// (default CLIPBOARD and PRIMARY).
func (c *Client) ClipboardSet(ctx context.Context, selections []string, mime string, data []byte) error {
	if !c.Has(FeatureClipboard) {
		return fault.Conflict("this desktop's driver has no clipboard; prepare the desktop image again")
	}
	if len(data) > MaxClipboard {
		return fault.Invalid("clipboard content is %d bytes, over the %d MiB limit", len(data), MaxClipboard>>20)
	}
	_, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpClipboardSet, wire.ClipboardArgs{Selections: selections, Mime: mime}, data, nil)
	return err
}

// NextClipboard waits until a selection of the desktop changes owner after `after`; with 0
// it answers at once with the current state (the Gen to wait after). No deadline is added:
// the caller's context bounds the wait.
func (c *Client) NextClipboard(ctx context.Context, after uint64) (ClipboardChange, error) {
	var ch ClipboardChange
	_, err := c.call(ctx, wire.OpNextClipboard, wire.ClipboardWaitArgs{After: after}, nil, &ch)
	return ch, err
}

// Resize changes the desktop's screen size (RandR); the result is the size now. Frames and
// screenshots after it have the new size.
func (c *Client) Resize(ctx context.Context, width, height int) (Size, error) {
	if !c.Has(FeatureResize) {
		return Size{}, fault.Conflict("this desktop's driver cannot resize the screen; prepare the desktop image again")
	}
	var s Size
	_, err := c.callWithin(ctx, c.opts.CallTimeout, wire.OpResize, wire.ResizeArgs{Width: width, Height: height}, nil, &s)
	return s, err
}
