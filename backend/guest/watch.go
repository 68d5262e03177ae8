package guest

import (
	"context"
	"time"

	"cubicle/backend/fault"
	"cubicle/images/guest/wire"
)

// FeatureWatch: the driver answers WaitDir.
const FeatureWatch = wire.FeatureWatch

// WaitDir waits until something in the desktop's folder path changes (inotify in the guest:
// an entry created, removed or renamed, a file written and closed) and reports whether it did
// before timeout (at most wire.MaxDirWait). A driver without it answers fault.ErrConflict.
func (c *Client) WaitDir(ctx context.Context, path string, timeout time.Duration) (bool, error) {
	if !c.Has(FeatureWatch) {
		return false, fault.Conflict("this desktop's driver cannot watch a folder; prepare the desktop image again")
	}
	var ch wire.DirChange
	_, err := c.callWithin(ctx, timeout+c.opts.CallTimeout, wire.OpWaitDir, wire.WaitDirArgs{Path: path, Timeout: timeout}, nil, &ch)
	return ch.Changed, err
}
