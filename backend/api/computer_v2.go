package api

import (
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/guest"
	"cubicle/backend/screen"
)

// Version 2 of the computer channel (docs/computer-protocol.md): the screen as changed
// regions, the pointer as its own small messages, and per-viewer flow control. A client asks
// for it with the websocket subprotocol below; without it the connection speaks version 1.

// subprotocolV2 is the websocket subprotocol of version 2.
const subprotocolV2 = "cubicle.computer.v2"

// Version 2 binary message layout.
const (
	updateHeaderLen = 32
	regionHeaderLen = 16
	frameVersion2   = 2
	kindUpdate      = 1
)

// Update flags (byte 7).
const (
	updateKey      = 1 << 0 // the regions cover the whole screen
	updateLossless = 1 << 1 // every pixel is exact after this update
	updateRefresh  = 1 << 2 // only a lossless repeat of parts that stopped changing
)

// Region encodings on the wire.
var regionCodes = map[string]byte{guest.EncJPEG: 1, guest.EncPNG: 2, guest.EncFill: 3, guest.EncCopy: 4}

// pointerJSON is the pointer's position (sent when it moves).
type pointerJSON struct {
	Type string `json:"type"` // pointer
	X    int    `json:"x"`
	Y    int    `json:"y"`
}

// cursorJSON is the pointer's image (sent when it changes, before the position).
type cursorJSON struct {
	Type   string `json:"type"` // cursor
	Serial uint32 `json:"serial"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	HotX   int    `json:"hotX"`
	HotY   int    `json:"hotY"`
	PNG    string `json:"png"` // base64
}

// region is one region to write, with the bytes of its data.
type region struct {
	r    guest.Region
	data []byte
}

// mergeBatch turns the updates of a batch into the regions of one message, in order: for
// each JPEG region the part of the quality closest to the viewer's level, and without the
// regions a later one paints over entirely (unless a copy in between reads the screen).
func mergeBatch(us []*guest.Update, level int, out []region) []region {
	out = out[:0]
	want := screen.Levels[min(max(level, 0), len(screen.Levels)-1)]
	for _, u := range us {
		if u.Key {
			out = out[:0] // a keyframe paints everything: nothing before it matters
		}
		part := bestPart(u, want)
		for _, r := range u.Regions {
			var data []byte
			switch r.Enc {
			case guest.EncJPEG:
				p := r.Parts[min(part, len(r.Parts)-1)]
				data = u.Data[p.Off : p.Off+p.Len]
			case guest.EncPNG:
				p := r.Parts[0]
				data = u.Data[p.Off : p.Off+p.Len]
			}
			out = append(out, region{r: r, data: data})
		}
	}
	// Drop regions covered by a later one; a copy reads the screen, so nothing before a
	// copy may go.
	keep := out[:0]
	for i, a := range out {
		covered := false
		if a.r.Enc != guest.EncCopy {
			for _, b := range out[i+1:] {
				if b.r.Enc == guest.EncCopy {
					break
				}
				if b.r.X <= a.r.X && b.r.Y <= a.r.Y && b.r.X+b.r.W >= a.r.X+a.r.W && b.r.Y+b.r.H >= a.r.Y+a.r.H {
					covered = true
					break
				}
			}
		}
		if !covered {
			keep = append(keep, a)
		}
	}
	return keep
}

// bestPart is the index of u's JPEG part encoded at level want, else of the one closest to it
// (the same scale first, then the nearest quality); 0 when u has no parts.
func bestPart(u *guest.Update, want screen.Level) int {
	scale := func(i int) int {
		if i < len(u.Scales) {
			return u.Scales[i]
		}
		return 1
	}
	best, bestD := 0, -1
	for i, q := range u.Qualities {
		d := abs(q - want.Quality)
		if scale(i) != want.Scale {
			d += 1000
		}
		if bestD < 0 || d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// writeUpdate sends one version 2 update message made of regions (see the layout above) and
// returns its size. lossy: the viewer skipped refreshes, so it is not exact whatever the last
// update says.
func (k *computerConn) writeUpdate(us []*guest.Update, regions []region, lossy bool) (int, error) {
	last := us[len(us)-1]
	var flags byte
	if us[0].Key {
		flags |= updateKey
	}
	if last.Lossless && !lossy {
		flags |= updateLossless
	}
	refresh := true
	for _, u := range us {
		refresh = refresh && u.Refresh
	}
	if refresh {
		flags |= updateRefresh
	}
	var hdr [updateHeaderLen]byte
	copy(hdr[0:4], frameMagic)
	hdr[4], hdr[5], hdr[6], hdr[7] = frameVersion2, updateHeaderLen, kindUpdate, flags
	binary.BigEndian.PutUint64(hdr[8:], last.FrameID)
	binary.BigEndian.PutUint32(hdr[16:], uint32(last.Width))
	binary.BigEndian.PutUint32(hdr[20:], uint32(last.Height))
	binary.BigEndian.PutUint32(hdr[24:], uint32(len(regions)))
	k.sent(last.FrameID) // before the bytes can reach the client (see writeFrame)
	k.ws.SetWriteDeadline(time.Now().Add(k.ch.cfg.WriteTimeout))
	w, err := k.ws.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return 0, err
	}
	n := updateHeaderLen
	if _, err := w.Write(hdr[:]); err != nil {
		return n, err
	}
	for _, rg := range regions {
		r := rg.r
		var rh [regionHeaderLen]byte
		binary.BigEndian.PutUint16(rh[0:], uint16(r.X))
		binary.BigEndian.PutUint16(rh[2:], uint16(r.Y))
		binary.BigEndian.PutUint16(rh[4:], uint16(r.W))
		binary.BigEndian.PutUint16(rh[6:], uint16(r.H))
		rh[8] = regionCodes[r.Enc]
		data := rg.data
		var small [4]byte
		switch r.Enc {
		case guest.EncFill:
			small = [4]byte{byte(r.Color >> 16), byte(r.Color >> 8), byte(r.Color), 0xff}
			data = small[:]
		case guest.EncCopy:
			binary.BigEndian.PutUint16(small[0:], uint16(r.SrcX))
			binary.BigEndian.PutUint16(small[2:], uint16(r.SrcY))
			data = small[:]
		}
		binary.BigEndian.PutUint32(rh[12:], uint32(len(data)))
		if _, err := w.Write(rh[:]); err != nil {
			return n, err
		}
		if _, err := w.Write(data); err != nil {
			return n, err
		}
		n += regionHeaderLen + len(data)
	}
	if err := w.Close(); err != nil {
		return n, err
	}
	return n, nil
}

// writeBatch writes what a region viewer took: the cursor image, the pointer position and
// the updates merged into one message. It returns the bytes of the update message. lossy: see
// writeUpdate.
func (k *computerConn) writeBatch(b screen.Batch, scratch *[]region, lossy bool) (int, error) {
	if c := b.Cursor; c != nil {
		if err := k.writeJSON(cursorJSON{Type: "cursor", Serial: c.Serial, Width: c.Width, Height: c.Height,
			HotX: c.HotX, HotY: c.HotY, PNG: base64.StdEncoding.EncodeToString(c.PNG)}); err != nil {
			return 0, err
		}
	}
	if p := b.Pointer; p != nil {
		if err := k.writeJSON(pointerJSON{Type: "pointer", X: p.X, Y: p.Y}); err != nil {
			return 0, err
		}
	}
	if len(b.Updates) == 0 {
		return 0, nil
	}
	*scratch = mergeBatch(b.Updates, b.Level, *scratch)
	return k.writeUpdate(b.Updates, *scratch, lossy)
}
