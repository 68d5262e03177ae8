package liveview

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cubicle/backend/control"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// This file handles the computer channel's clipboard and resize messages (docs/computer-
// protocol.md, "clipboard_set", "resize"): both need the control lease like input, and the
// desktop's clipboard is sent to the person who holds it whenever it changes.

// clipboardDriver is what the channel uses of a driver's clipboard; *guest.Client has it.
type clipboardDriver interface {
	Has(feature string) bool
	ClipboardGet(ctx context.Context, selection, mime string) (guest.Clipboard, error)
	ClipboardSet(ctx context.Context, selections []string, mime string, data []byte) error
	NextClipboard(ctx context.Context, after uint64) (guest.ClipboardChange, error)
}

// resizeDriver resizes a desktop's screen; *guest.Client has it.
type resizeDriver interface {
	Has(feature string) bool
	Resize(ctx context.Context, width, height int) (guest.Size, error)
}

var (
	_ clipboardDriver = (*guest.Client)(nil)
	_ resizeDriver    = (*guest.Client)(nil)
)

// clipboardJSON carries clipboard content: the answer to clipboard_get, and (without id/op)
// the desktop's clipboard when it changed while this person controls the desktop.
type clipboardJSON struct {
	Type    string `json:"type"` // clipboard
	ID      string `json:"id,omitempty"`
	Op      string `json:"op,omitempty"`
	Mime    string `json:"mime,omitempty"`
	Size    int    `json:"size"`
	Text    string `json:"text,omitempty"`    // text content
	Data    []byte `json:"data,omitempty"`    // an image (base64 in JSON)
	Message string `json:"message,omitempty"` // why content is missing (e.g. over the limit)
}

// resizedJSON answers resize: the screen's size now.
type resizedJSON struct {
	Type   string `json:"type"` // resized
	ID     string `json:"id,omitempty"`
	Op     string `json:"op"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
}

func clipContent(c guest.Clipboard) clipboardJSON {
	out := clipboardJSON{Type: "clipboard", Mime: c.Mime, Size: len(c.Data)}
	if c.Mime == guest.MimePNG {
		out.Data = c.Data
	} else {
		out.Text = string(c.Data)
	}
	return out
}

// desktopOp performs clipboard_set, clipboard_get and resize for the lease holder.
func (k *conn) desktopOp(m *clientMsg, d Desktop, refused func(error) any, notRunning func() any) any {
	if r := k.checkLease(m, d, "the message", refused, notRunning); r != nil {
		return r
	}
	ctx, cancel := context.WithTimeout(k.ctx, 30*time.Second)
	defer cancel()
	if m.Type == "resize" {
		rd, ok := d.Client.(resizeDriver)
		if !ok || !rd.Has(guest.FeatureResize) {
			return refused(fault.Conflict("this desktop cannot be resized (its image predates resizing; prepare it again)"))
		}
		sz, err := rd.Resize(ctx, m.Width, m.Height)
		if err != nil {
			return refused(err)
		}
		k.ch.log.Info("computer: resize", "desktop", d.ID, "width", sz.Width, "height", sz.Height, "user", k.p.Username)
		return resizedJSON{Type: "resized", ID: m.ID, Op: m.Type, Width: sz.Width, Height: sz.Height}
	}
	cd, ok := d.Client.(clipboardDriver)
	if !ok || !cd.Has(guest.FeatureClipboard) {
		return refused(fault.Conflict("this desktop has no clipboard (its image predates it; prepare it again)"))
	}
	if m.Type == "clipboard_get" {
		c, err := cd.ClipboardGet(ctx, m.Selection, m.Mime)
		if err != nil {
			return refused(err)
		}
		out := clipContent(c)
		out.ID, out.Op = m.ID, m.Type
		return out
	}
	mime, data := m.Mime, []byte(m.Text)
	switch mime {
	case "", "text/plain", guest.MimeText:
		mime = guest.MimeText
	case guest.MimePNG:
		data = m.Data
	default:
		return refused(fault.Invalid("clipboard type %q is not supported; send text (%s) or a PNG image (%s)", m.Mime, guest.MimeText, guest.MimePNG))
	}
	if len(data) > guest.MaxClipboard {
		return refused(fault.Invalid("the clipboard holds %.1f MiB; at most %d MiB can be copied to the desktop", float64(len(data))/(1<<20), guest.MaxClipboard>>20))
	}
	var sel []string
	if m.Selection != "" {
		sel = []string{m.Selection}
	}
	if err := cd.ClipboardSet(ctx, sel, mime, data); err != nil {
		return refused(err)
	}
	return okJSON{Type: "ok", ID: m.ID, Op: m.Type}
}

// controlling reports whether this connection holds control of desktop id: its person, through
// this agent, with the lease granted on this connection (another window of the same person only
// watches).
func (k *conn) controlling(id string) bool {
	h, ok := k.ch.cfg.Control.Holder(id)
	k.mu.Lock()
	ver := k.leaseVer
	k.mu.Unlock()
	return ok && h.Kind == control.HolderPerson && h.Person.AccountID == k.p.AccountID && h.Person.AgentID == k.agentID &&
		ver != 0 && h.Version == ver
}

// watchClipboard sends the desktop's clipboard to the client whenever another program of the
// desktop copies something while this person holds control. The driver reports changes as
// they happen (XFIXES selection events); nothing is polled. It ends with the connection.
func (k *conn) watchClipboard() {
	var (
		client clipboardDriver
		after  uint64
	)
	pause := func(d time.Duration) bool {
		select {
		case <-k.ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for k.ctx.Err() == nil {
		d := k.current()
		cd, ok := d.Client.(clipboardDriver)
		if d.State != "running" || !ok || !cd.Has(guest.FeatureClipboard) {
			// No desktop with a clipboard yet: look again when the desktop may have changed.
			if !pause(2 * time.Second) {
				return
			}
			continue
		}
		if cd != client {
			// A new driver connection: start from its current state (0 answers at once).
			ch, err := cd.NextClipboard(k.ctx, 0)
			if err != nil {
				if !pause(2 * time.Second) {
					return
				}
				continue
			}
			client, after = cd, ch.Gen
		}
		ch, err := cd.NextClipboard(k.ctx, after)
		if err != nil {
			if k.ctx.Err() == nil {
				k.ch.log.Debug("computer: clipboard watch", "desktop", d.ID, "err", err)
				client = nil
				if !pause(2 * time.Second) {
					return
				}
			}
			continue
		}
		after = ch.Gen
		if ch.Own || ch.Selection != "clipboard" || !k.controlling(d.ID) {
			continue
		}
		ctx, cancel := context.WithTimeout(k.ctx, 30*time.Second)
		c, err := cd.ClipboardGet(ctx, "clipboard", "")
		cancel()
		var msg clipboardJSON
		switch {
		case err == nil:
			msg = clipContent(c)
		case errors.Is(err, fault.ErrNotFound):
			continue // copied something that is neither text nor PNG
		case errors.Is(err, fault.ErrInvalid):
			msg = clipboardJSON{Type: "clipboard", Message: fmt.Sprintf("the desktop copied more than %d MiB; it was not sent to your clipboard", guest.MaxClipboard>>20)}
		default:
			k.ch.log.Debug("computer: read clipboard", "desktop", d.ID, "err", err)
			continue
		}
		k.reply(msg)
	}
}
