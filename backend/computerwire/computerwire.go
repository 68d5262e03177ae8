// Package computerwire writes the messages of version 2 of the computer channel
// (docs/computer-protocol.md): the screen's changed regions as one binary update message, the
// pointer's image and position as small text messages. The live view (backend/api) sends them
// to viewers; a recording (backend/recording) keeps them byte for byte, so that a replay is
// drawn by the live view's own decoder. One writer for both keeps them in step.
package computerwire

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"

	"cubicle/backend/guest"
	"cubicle/backend/screen"
)

// Subprotocol is the websocket subprotocol of version 2; without it a connection speaks
// version 1.
const Subprotocol = "cubicle.computer.v2"

// The update message's layout.
const (
	HeaderLen       = 32     // the update header
	RegionHeaderLen = 16     // each region's header
	Magic           = "CBFR" // starts every binary message (version 1's frames too)
	Version         = 2
	KindUpdate      = 1
)

// Update flags (byte 7 of the header).
const (
	FlagKey      = 1 << 0 // the regions cover the whole screen
	FlagLossless = 1 << 1 // every pixel is exact after this update
	FlagRefresh  = 1 << 2 // only a lossless repeat of parts that stopped changing
)

// regionCodes are the region encodings on the wire.
var regionCodes = map[string]byte{guest.EncJPEG: 1, guest.EncPNG: 2, guest.EncFill: 3, guest.EncCopy: 4}

// Region is one region to write, with the bytes of its data.
type Region struct {
	R    guest.Region
	Data []byte
}

// Merge turns the updates of a batch into the regions of one message, in order, appended to
// out[:0]: for each JPEG region the part of the quality closest to the viewer's level, and
// without the regions a later one paints over entirely (unless a copy in between reads the
// screen).
func Merge(us []*guest.Update, level int, out []Region) []Region {
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
			out = append(out, Region{R: r, Data: data})
		}
	}
	// Drop regions covered by a later one; a copy reads the screen, so nothing before a
	// copy may go.
	keep := out[:0]
	for i, a := range out {
		covered := false
		if a.R.Enc != guest.EncCopy {
			for _, b := range out[i+1:] {
				if b.R.Enc == guest.EncCopy {
					break
				}
				if b.R.X <= a.R.X && b.R.Y <= a.R.Y && b.R.X+b.R.W >= a.R.X+a.R.W && b.R.Y+b.R.H >= a.R.Y+a.R.H {
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
		d := q - want.Quality
		if d < 0 {
			d = -d
		}
		if scale(i) != want.Scale {
			d += 1000
		}
		if bestD < 0 || d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// Header is the header of the update message of updates us (in order) made of n regions.
// lossy: the viewer skipped refreshes, so the picture is not exact whatever the last update
// says.
func Header(us []*guest.Update, n int, lossy bool) [HeaderLen]byte {
	last := us[len(us)-1]
	var flags byte
	if us[0].Key {
		flags |= FlagKey
	}
	if last.Lossless && !lossy {
		flags |= FlagLossless
	}
	refresh := true
	for _, u := range us {
		refresh = refresh && u.Refresh
	}
	if refresh {
		flags |= FlagRefresh
	}
	var hdr [HeaderLen]byte
	copy(hdr[0:4], Magic)
	hdr[4], hdr[5], hdr[6], hdr[7] = Version, HeaderLen, KindUpdate, flags
	binary.BigEndian.PutUint64(hdr[8:], last.FrameID)
	binary.BigEndian.PutUint32(hdr[16:], uint32(last.Width))
	binary.BigEndian.PutUint32(hdr[20:], uint32(last.Height))
	binary.BigEndian.PutUint32(hdr[24:], uint32(n))
	return hdr
}

// RegionHeader is rg's header and the data that follows it (a fill's colour and a copy's
// source are written inline, in small).
func RegionHeader(rg Region, small *[4]byte) ([RegionHeaderLen]byte, []byte) {
	r := rg.R
	var rh [RegionHeaderLen]byte
	binary.BigEndian.PutUint16(rh[0:], uint16(r.X))
	binary.BigEndian.PutUint16(rh[2:], uint16(r.Y))
	binary.BigEndian.PutUint16(rh[4:], uint16(r.W))
	binary.BigEndian.PutUint16(rh[6:], uint16(r.H))
	rh[8] = regionCodes[r.Enc]
	data := rg.Data
	switch r.Enc {
	case guest.EncFill:
		*small = [4]byte{byte(r.Color >> 16), byte(r.Color >> 8), byte(r.Color), 0xff}
		data = small[:]
	case guest.EncCopy:
		binary.BigEndian.PutUint16(small[0:], uint16(r.SrcX))
		binary.BigEndian.PutUint16(small[2:], uint16(r.SrcY))
		data = small[:]
	}
	binary.BigEndian.PutUint32(rh[12:], uint32(len(data)))
	return rh, data
}

// Update is the whole update message of us for a viewer at level (see Merge and Header).
func Update(us []*guest.Update, level int, lossy bool) []byte {
	regions := Merge(us, level, nil)
	size := HeaderLen
	for _, rg := range regions {
		size += RegionHeaderLen + max(len(rg.Data), 4)
	}
	hdr := Header(us, len(regions), lossy)
	buf := append(make([]byte, 0, size), hdr[:]...)
	var small [4]byte
	for _, rg := range regions {
		rh, data := RegionHeader(rg, &small)
		buf = append(buf, rh[:]...)
		buf = append(buf, data...)
	}
	return buf
}

// Size reads the screen size of an update message.
func Size(msg []byte) (w, h int) {
	if len(msg) < HeaderLen {
		return 0, 0
	}
	return int(binary.BigEndian.Uint32(msg[16:])), int(binary.BigEndian.Uint32(msg[20:]))
}

// Cursor is the cursor message: the pointer's image (sent when it changes, before the position).
func Cursor(c *screen.Cursor) []byte {
	raw, _ := json.Marshal(struct {
		Type   string `json:"type"` // cursor
		Serial uint32 `json:"serial"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
		HotX   int    `json:"hotX"`
		HotY   int    `json:"hotY"`
		PNG    string `json:"png"` // base64
	}{"cursor", c.Serial, c.Width, c.Height, c.HotX, c.HotY, base64.StdEncoding.EncodeToString(c.PNG)})
	return raw
}

// Pointer is the pointer message: its position (sent when it moves).
func Pointer(p *screen.Pointer) []byte {
	raw, _ := json.Marshal(struct {
		Type string `json:"type"` // pointer
		X    int    `json:"x"`
		Y    int    `json:"y"`
	}{"pointer", p.X, p.Y})
	return raw
}
