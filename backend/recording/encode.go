package recording

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"

	"cubicle/backend/guest"
	"cubicle/backend/screen"
)

// A recording holds the computer channel's version 2 messages byte for byte
// (docs/computer-protocol.md), so that a replay is drawn by the live view's own decoder. This
// file builds them from what a region viewer takes, as backend/api's computer channel does
// for a live viewer (the same layout; keep both in step).

const (
	updateHeaderLen = 32
	regionHeaderLen = 16
	frameMagic      = "CBFR"
	frameVersion2   = 2
	kindUpdate      = 1
	updateKey       = 1 << 0
	updateLossless  = 1 << 1
	updateRefresh   = 1 << 2
)

var regionCodes = map[string]byte{guest.EncJPEG: 1, guest.EncPNG: 2, guest.EncFill: 3, guest.EncCopy: 4}

type region struct {
	r    guest.Region
	data []byte
}

// encodeUpdates returns the version 2 update message of us (in order) for a viewer at level:
// the JPEG part of each region closest to it, without regions a later one paints over. lossy:
// refreshes were skipped, so the picture is not exact whatever the last update says.
func encodeUpdates(us []*guest.Update, level int, lossy bool) []byte {
	want := screen.Levels[min(max(level, 0), len(screen.Levels)-1)]
	var out []region
	for _, u := range us {
		if u.Key {
			out = out[:0]
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
	size := updateHeaderLen
	for _, rg := range keep {
		size += regionHeaderLen + max(len(rg.data), 4)
	}
	buf := make([]byte, updateHeaderLen, size)
	copy(buf[0:4], frameMagic)
	buf[4], buf[5], buf[6], buf[7] = frameVersion2, updateHeaderLen, kindUpdate, flags
	binary.BigEndian.PutUint64(buf[8:], last.FrameID)
	binary.BigEndian.PutUint32(buf[16:], uint32(last.Width))
	binary.BigEndian.PutUint32(buf[20:], uint32(last.Height))
	binary.BigEndian.PutUint32(buf[24:], uint32(len(keep)))
	for _, rg := range keep {
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
		buf = append(buf, rh[:]...)
		buf = append(buf, data...)
	}
	return buf
}

// bestPart is the index of u's JPEG part encoded at level want, else the closest.
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

// cursorMessage and pointerMessage are the channel's cursor and pointer text messages.
func cursorMessage(c *screen.Cursor) []byte {
	raw, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Serial uint32 `json:"serial"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
		HotX   int    `json:"hotX"`
		HotY   int    `json:"hotY"`
		PNG    string `json:"png"`
	}{"cursor", c.Serial, c.Width, c.Height, c.HotX, c.HotY, base64.StdEncoding.EncodeToString(c.PNG)})
	return raw
}

func pointerMessage(p *screen.Pointer) []byte {
	raw, _ := json.Marshal(struct {
		Type string `json:"type"`
		X    int    `json:"x"`
		Y    int    `json:"y"`
	}{"pointer", p.X, p.Y})
	return raw
}

// updateSize reads the screen size of a version 2 update message.
func updateSize(msg []byte) (w, h int) {
	if len(msg) < updateHeaderLen {
		return 0, 0
	}
	return int(binary.BigEndian.Uint32(msg[16:])), int(binary.BigEndian.Uint32(msg[20:]))
}
