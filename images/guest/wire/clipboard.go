package wire

// Operations of the clipboard and of screen resizing (docs/guest-protocol.md, "clipboard_get",
// "resize"). They are additions: a driver that has them lists FeatureClipboard and
// FeatureResize in its hello; an older one answers CodeInvalid (unknown operation).
const (
	OpClipboardGet  = "clipboard_get"
	OpClipboardSet  = "clipboard_set"
	OpNextClipboard = "next_clipboard"
	OpResize        = "resize"
)

// Hello.Features of a driver with the clipboard operations and with resize.
const (
	FeatureClipboard = "clipboard"
	FeatureResize    = "resize"
)

// Clipboard limits and types.
const (
	// MaxClipboard caps clipboard content in either direction (10 MiB).
	MaxClipboard = 10 << 20
	// MimeText is UTF-8 text; MimePNG a PNG image.
	MimeText = "text/plain;charset=utf-8"
	MimePNG  = "image/png"
	// Screen sizes a resize accepts at least; the largest is the driver's MaxScreen.
	MinScreenWidth  = 320
	MinScreenHeight = 240
)

// ClipboardArgs selects a selection and a type. clipboard_get reads Selection ("clipboard",
// the default, or "primary"); Mime "" takes text when offered, else a PNG. clipboard_set
// takes Selections (default both) with the blob as content of type Mime (default text).
type ClipboardArgs struct {
	Selection  string   `json:"selection,omitempty"`
	Selections []string `json:"selections,omitempty"`
	Mime       string   `json:"mime,omitempty"`
}

// Clipboard is clipboard_get's result; the blob is the content.
type Clipboard struct {
	Mime string `json:"mime"`
	Size int    `json:"size"`
	Data []byte `json:"-"`
}

// ClipboardWaitArgs asks next_clipboard for the first change with Gen above After.
type ClipboardWaitArgs struct {
	After uint64 `json:"after"`
}

// ClipboardChange is one change of a selection's owner (XFIXES selection events). Gen grows
// with every change and across X connections (like frame ids); Own is true when the driver
// itself took the selection (clipboard_set), so a host can ignore its own echo.
type ClipboardChange struct {
	Gen       uint64 `json:"gen"`
	Selection string `json:"selection,omitempty"`
	Own       bool   `json:"own,omitempty"`
}

// ResizeArgs asks for a screen of Width×Height (rounded down to even numbers).
type ResizeArgs struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}
