package guest

import (
	"context"
	"fmt"

	"cubicle/images/guest/wire"
)

// The region stream and pointer vocabulary (see package wire for the fields).
type (
	UpdateArgs   = wire.UpdateArgs
	KeyframeArgs = wire.KeyframeArgs
	Update       = wire.Update
	Region       = wire.Region
	Part         = wire.Part
	PointerArgs  = wire.PointerArgs
	PointerState = wire.PointerState
	CursorShape  = wire.CursorShape
	SettleReport = wire.SettleReport
)

// Hello.Features of a driver with region streams and pointer reports.
const (
	FeatureRegions = wire.FeatureRegions
	FeaturePointer = wire.FeaturePointer
)

// Region encodings.
const (
	EncJPEG = wire.EncJPEG
	EncPNG  = wire.EncPNG
	EncFill = wire.EncFill
	EncCopy = wire.EncCopy
)

// NextUpdate asks region stream a.Stream for its next update (creating the stream on first
// use): a keyframe when a.After is not the stream's newest Seq, else the next change or
// lossless refresh. A driver without region streams answers fault.ErrInvalid.
func (c *Client) NextUpdate(ctx context.Context, a UpdateArgs) (Update, error) {
	var u Update
	blob, err := c.call(ctx, wire.OpNextUpdate, a, nil, &u)
	if err != nil {
		return Update{}, err
	}
	u.Data = blob
	return u, checkParts(u)
}

// Keyframe returns the whole screen as region stream a.Stream's host has it at its newest
// Seq (for a viewer joining); the stream is unchanged.
func (c *Client) Keyframe(ctx context.Context, a KeyframeArgs) (Update, error) {
	var u Update
	blob, err := c.call(ctx, wire.OpKeyframe, a, nil, &u)
	if err != nil {
		return Update{}, err
	}
	u.Data = blob
	return u, checkParts(u)
}

// EndUpdates ends a region stream and frees what the driver keeps for it.
func (c *Client) EndUpdates(ctx context.Context, stream uint64) error {
	_, err := c.call(ctx, wire.OpEndUpdates, wire.EndUpdatesArgs{Stream: stream}, nil, nil)
	return err
}

// NextPointer waits until the pointer moved or changed its image since a.After; the PNG of
// the image is returned when a.Shape is not the current image's serial.
func (c *Client) NextPointer(ctx context.Context, a PointerArgs) (PointerState, []byte, error) {
	var p PointerState
	blob, err := c.call(ctx, wire.OpNextPointer, a, nil, &p)
	return p, blob, err
}

// checkParts makes sure every part of u lies inside its blob, so consumers can slice safely.
func checkParts(u Update) error {
	for _, r := range u.Regions {
		for _, p := range r.Parts {
			if p.Off < 0 || p.Len < 0 || p.Off+p.Len > len(u.Data) {
				return fmt.Errorf("desktop driver: %s: region data %d+%d outside the %d-byte blob", wire.OpNextUpdate, p.Off, p.Len, len(u.Data))
			}
		}
	}
	return nil
}
