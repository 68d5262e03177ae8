package bench

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// The clipboard row (issue 28): a text from the person's browser onto the desktop's clipboard
// and back, through the live view's computer channel, next to xclip forked in the desktop.
const (
	RowClipboardRoundtrip = "clipboard_roundtrip"
	// clipboardRounds is how many round trips each side makes (after one warm-up).
	clipboardRounds = 10
)

// clipText is the text of round i: a mixed-script line and 1 KiB, unique per round so that a
// stale clipboard never passes for the new one.
func clipText(i int) string {
	return fmt.Sprintf("cubicle clipboard %d — 你好, héllo, привет %s", i, strings.Repeat("x", 1024))
}

// clipboard measures clipboard_roundtrip: clipboard_set then clipboard_get over the version 2
// websocket (what the web UI sends when the person pastes in the view and when the desktop's
// clipboard is read back), under the person's lease, the text checked on its way back; next
// to the usual tool for the same trip, xclip -i then xclip -o started in the desktop by the
// driver's exec, interleaved round by round.
func (r *runner) clipboard(ctx context.Context, d *desktop) error {
	ls, err := r.startLive(ctx, d, d.client, "clipboard.db")
	if err != nil {
		return err
	}
	defer ls.close()
	c, lease, err := takeOverLive(ctx, ls)
	if err != nil {
		return err
	}
	defer c.close()
	// ask sends m and returns its reply, skipping what the channel pushes meanwhile (the
	// desktop's clipboard, sent to the person in control whenever it changes: a set changes it).
	ask := func(m map[string]any) (map[string]any, error) {
		m["token"], m["version"], m["frameId"] = lease["token"], lease["version"], c.newest.Load()
		if err := c.send(m); err != nil {
			return nil, err
		}
		for {
			rep, err := c.reply(ctx)
			if err != nil || rep["id"] == m["id"] {
				return rep, err
			}
		}
	}
	ours := func(text string) error {
		rep, err := ask(map[string]any{"type": "clipboard_set", "id": "s", "text": text})
		if err != nil {
			return err
		}
		if rep["type"] != "ok" {
			return fault.Unavailable("bench: clipboard_set refused: %v", rep)
		}
		if rep, err = ask(map[string]any{"type": "clipboard_get", "id": "g"}); err != nil {
			return err
		}
		if rep["type"] != "clipboard" || rep["text"] != text {
			return fault.Unavailable("bench: clipboard_get answered %.200v, not the text just set", rep)
		}
		return nil
	}
	peer := func(text string) error {
		// xclip -i stays in the background to serve the selection: its output goes nowhere so
		// that the exec ends when the command returns.
		res, err := d.client.Exec(ctx, guest.ExecRequest{Shell: "xclip -selection clipboard -i >/dev/null 2>&1",
			Stdin: []byte(text), Timeout: 30 * time.Second})
		if err == nil && res.ExitCode != 0 {
			err = fault.Unavailable("bench: xclip -i: exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
		}
		if err != nil {
			return err
		}
		// xclip -i takes the selection in the child it forks to serve it, after its parent
		// (what the exec waited for) has exited: until then xclip -o still prints the previous
		// owner's text (CI saw the round before's). The trip ends when the new text is read
		// back, so the peer's rounds include that wait, as a person's paste would.
		deadline := time.Now().Add(5 * time.Second)
		for {
			res, err = d.client.Exec(ctx, guest.ExecRequest{Command: []string{"xclip", "-selection", "clipboard", "-o"}, Timeout: 30 * time.Second})
			switch {
			case err != nil:
				return err
			case string(res.Stdout) == text:
				return nil
			case time.Now().After(deadline):
				return fault.Unavailable("bench: xclip -o printed %.200q (exit %d) for 5 s, not the text just set", res.Stdout, res.ExitCode)
			}
		}
	}
	var a, b []float64
	for i := -1; i < clipboardRounds; i++ {
		for _, side := range []struct {
			trip func(string) error
			into *[]float64
			text string
		}{{ours, &a, clipText(2 * i)}, {peer, &b, clipText(2*i + 1)}} {
			start := time.Now()
			if err := side.trip(side.text); err != nil {
				return err
			}
			if i >= 0 {
				*side.into = append(*side.into, ms(time.Since(start)))
			}
		}
	}
	r.add(Row{ID: RowClipboardRoundtrip, Title: "clipboard: a text onto the desktop's clipboard and back", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "version 2 websocket under the person's lease: clipboard_set (1 KiB, mixed scripts) → the driver owns CLIPBOARD and PRIMARY → ok; " +
			"clipboard_get → the driver converts CLIPBOARD → the text, checked; what the view does on a paste and on reading the desktop's clipboard", Samples: a},
		PeerName: "xclip", Peer: &Side{Method: "in the same desktop, started by the driver's exec: xclip -selection clipboard -i (the text on stdin), then xclip -selection clipboard -o, checked, " +
			"again until it prints the new text (xclip -i takes the selection in its forked child); interleaved round by round", Samples: b}})
	return nil
}
