package wire

import "time"

// Operations of the region stream and the pointer (docs/guest-protocol.md, "next_update").
// They are additions: a driver that has them lists FeatureRegions and FeaturePointer in its
// hello; one without answers CodeInvalid, and the host falls back to next_frame.
const (
	OpNextUpdate  = "next_update"
	OpKeyframe    = "keyframe"
	OpEndUpdates  = "end_updates"
	OpNextPointer = "next_pointer"
)

// Hello.Features of a driver with region streams (next_update, keyframe, end_updates) and
// pointer reports (next_pointer).
const (
	FeatureRegions = "regions"
	FeaturePointer = "pointer"
)

// Region encodings.
const (
	EncJPEG = "jpeg" // a JPEG of the rectangle, one per requested quality (Parts)
	EncPNG  = "png"  // a lossless PNG of the rectangle (one Part, shared by every quality)
	EncFill = "fill" // the rectangle is one colour (Color); no data
	EncCopy = "copy" // copy the W×H rectangle at SrcX,SrcY of the previous screen to X,Y; no data
)

// Limits of the region stream.
const (
	// MaxUpdateStreams caps the region streams one connection may hold open.
	MaxUpdateStreams = 8
	// MaxQualities caps UpdateArgs.Qualities.
	MaxQualities = 4
)

// UpdateArgs asks a region stream for its next update. A stream is the host's view of the
// screen: the driver remembers what it last sent on it (a copy of those pixels) and sends
// only what changed since, as rectangles.
type UpdateArgs struct {
	// Stream names the stream, chosen by the host (non-zero, unique on the connection). A
	// stream is created by its first next_update and lives until end_updates or the
	// connection closes.
	Stream uint64 `json:"stream"`
	// After is the Seq of the last update the host received on this stream (0: none yet).
	// When it is not the stream's newest Seq — a new stream, or an update lost on the way —
	// the answer is a keyframe.
	After uint64 `json:"after"`
	// Qualities are the JPEG qualities (1–100) to encode lossy regions at, at most
	// MaxQualities; each JPEG region carries one Part per quality, in this order. Default [80].
	Qualities []int `json:"qualities,omitempty"`
	// Scales, when set, has one entry per quality: 1 (full resolution) or 2 (half: the JPEG
	// of that part is a quarter of the pixels, for a viewer whose link cannot carry more).
	// Lossless regions are never scaled.
	Scales []int `json:"scales,omitempty"`
	// Refresh is how long a lossily encoded part of the screen must stay unchanged before
	// the stream sends it again losslessly. 0 means 250 ms; negative: never.
	Refresh time.Duration `json:"refresh,omitempty"`
}

// KeyframeArgs asks for the whole screen as the stream's hosts see it at its newest Seq (for
// a viewer joining an existing stream); the stream itself is unchanged.
type KeyframeArgs struct {
	Stream    uint64 `json:"stream"`
	Qualities []int  `json:"qualities,omitempty"`
	Scales    []int  `json:"scales,omitempty"`
}

// EndUpdatesArgs ends a stream and frees what the driver keeps for it.
type EndUpdatesArgs struct {
	Stream uint64 `json:"stream"`
}

// Update is one step of a region stream: applying its regions in order to the screen as of
// update Seq−1 (or to anything, for a keyframe) gives the screen as of Seq. The blob holds
// the regions' data, addressed by their Parts.
type Update struct {
	Stream  uint64 `json:"stream"`
	Seq     uint64 `json:"seq"`
	FrameID uint64 `json:"frame_id"` // the screen generation captured (as Frame.ID)
	Width   int    `json:"width"`    // the screen size; a keyframe follows any change of it
	Height  int    `json:"height"`
	// Key: the regions cover the whole screen; nothing before is needed.
	Key bool `json:"key,omitempty"`
	// Refresh: the update only repeats, losslessly, parts that stopped changing.
	Refresh bool `json:"refresh,omitempty"`
	// Lossless: after this update every pixel the host has is exact.
	Lossless  bool      `json:"lossless,omitempty"`
	Qualities []int     `json:"qualities,omitempty"` // the qualities of the JPEG parts, in order
	Scales    []int     `json:"scales,omitempty"`    // their scales (absent: all 1)
	Regions   []Region  `json:"regions"`
	Captured  time.Time `json:"captured"`
	Data      []byte    `json:"-"` // the blob of the message
}

// Region is one rectangle of an update.
type Region struct {
	X    int    `json:"x"`
	Y    int    `json:"y"`
	W    int    `json:"w"`
	H    int    `json:"h"`
	Enc  string `json:"enc"`
	SrcX int    `json:"src_x,omitempty"` // copy
	SrcY int    `json:"src_y,omitempty"`
	// Color is the fill colour, 0xRRGGBB.
	Color uint32 `json:"color,omitempty"`
	// Parts locate the encoded data in the blob: one per quality for jpeg, one for png.
	Parts []Part `json:"parts,omitempty"`
}

// Part is a slice of an update's blob. W and H are the encoded image's size when it is
// smaller than the region (a scaled JPEG; draw it stretched to the region); 0 otherwise.
type Part struct {
	Off int `json:"off"`
	Len int `json:"len"`
	W   int `json:"w,omitempty"`
	H   int `json:"h,omitempty"`
}

// PointerArgs waits for the pointer to move or change its image.
type PointerArgs struct {
	// After is the Gen of the last state received (0: answer at once).
	After uint64 `json:"after"`
	// Shape is the Serial of the cursor image the host has (0: none); a different current
	// image is sent along (the blob: a PNG).
	Shape uint32 `json:"shape"`
	// Poll is how often the position is polled while waiting (pointer motion by programs
	// raises no event); 0 means 33 ms, at least 8 ms.
	Poll time.Duration `json:"poll,omitempty"`
}

// PointerState is where the pointer is and what it looks like.
type PointerState struct {
	Gen    uint64 `json:"gen"`
	X      int    `json:"x"`
	Y      int    `json:"y"`
	Serial uint32 `json:"serial"` // the cursor image's serial; 0 = unknown
	// Shape is set when the blob holds the cursor image as PNG (Serial differs from
	// PointerArgs.Shape): its size and hot spot.
	Shape *CursorShape `json:"shape,omitempty"`
}

// CursorShape describes a cursor image sent as PNG.
type CursorShape struct {
	Width  int `json:"width"`
	Height int `json:"height"`
	HotX   int `json:"hot_x"`
	HotY   int `json:"hot_y"`
}

// SettleReport says how a settle wait went (Frame.Settle).
type SettleReport struct {
	Settled bool          `json:"settled"` // false: the cap ran out while the screen kept changing
	Changes int           `json:"changes"` // changes seen after the request
	Quiet   time.Duration `json:"quiet"`   // the quiet period finally required
	Waited  time.Duration `json:"waited"`
}
