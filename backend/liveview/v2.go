package liveview

import (
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/computerwire"
	"cubicle/backend/guest"
	"cubicle/backend/screen"
)

// Version 2 of the computer channel (docs/computer-protocol.md): the screen as changed
// regions, the pointer as its own small messages, and per-viewer flow control. A client asks
// for it with the websocket subprotocol below; without it the connection speaks version 1.

// subprotocolV2 is the websocket subprotocol of version 2.
const subprotocolV2 = computerwire.Subprotocol

// writeUpdate sends one version 2 update message made of regions (computerwire's layout) and
// returns its size. lossy: the viewer skipped refreshes, so it is not exact whatever the last
// update says.
func (k *conn) writeUpdate(us []*guest.Update, regions []computerwire.Region, lossy bool) (int, error) {
	hdr := computerwire.Header(us, len(regions), lossy)
	k.sent(us[len(us)-1].FrameID) // before the bytes can reach the client (see writeFrame)
	k.ws.SetWriteDeadline(time.Now().Add(k.ch.cfg.WriteTimeout))
	w, err := k.ws.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return 0, err
	}
	n := computerwire.HeaderLen
	if _, err := w.Write(hdr[:]); err != nil {
		return n, err
	}
	var small [4]byte
	for _, rg := range regions {
		rh, data := computerwire.RegionHeader(rg, &small)
		if _, err := w.Write(rh[:]); err != nil {
			return n, err
		}
		if _, err := w.Write(data); err != nil {
			return n, err
		}
		n += computerwire.RegionHeaderLen + len(data)
	}
	if err := w.Close(); err != nil {
		return n, err
	}
	return n, nil
}

// writeBatch writes what a region viewer took: the cursor image, the pointer position and
// the updates merged into one message. It returns the bytes of the update message. lossy: see
// writeUpdate.
func (k *conn) writeBatch(b screen.Batch, scratch *[]computerwire.Region, lossy bool) (int, error) {
	if c := b.Cursor; c != nil {
		if err := k.writeText(computerwire.Cursor(c)); err != nil {
			return 0, err
		}
	}
	if p := b.Pointer; p != nil {
		if err := k.writeText(computerwire.Pointer(p)); err != nil {
			return 0, err
		}
	}
	if len(b.Updates) == 0 {
		return 0, nil
	}
	*scratch = computerwire.Merge(b.Updates, b.Level, *scratch)
	return k.writeUpdate(b.Updates, *scratch, lossy)
}
