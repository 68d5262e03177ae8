package liveview

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/gorilla/websocket"

	"cubicle/backend/computerwire"
	"cubicle/backend/guest"
	"cubicle/backend/screen"
)

// This file is what a connection watches of its desktop's screen, in one shape for both
// versions: the writer asks a stream when something waits and has it write, and the stream
// ends when its hub's does. Version 1 (and any client of a driver without region streams)
// gets whole frames; version 2 gets region updates under flow control.

// stream is the screen one connection watches. The connection's writer goroutine owns it:
// nothing else calls it.
type stream interface {
	// ready is signalled when something waits to be written; then call send.
	ready() <-chan struct{}
	// done is closed when the stream has ended; err says why.
	done() <-chan struct{}
	err() error
	// held fires when flow control made updates wait; then call resume. nil: never.
	held() <-chan time.Time
	// send writes what waits (what flow control lets through).
	send() error
	// resume writes what flow control held back, once held has fired.
	resume() error
	// close stops watching.
	close()
}

// watch starts watching d's screen: regions when the client speaks version 2 and d's driver
// streams them (and is not noRegions, the driver found too old for them), frames otherwise.
func (k *conn) watch(d Desktop, noRegions Driver) (stream, error) {
	rs, regions := d.Client.(screen.RegionSource)
	if hc, ok := d.Client.(interface{ Hello() guest.Hello }); ok && !slices.Contains(hc.Hello().Features, guest.FeatureRegions) {
		regions = false // a driver from before region streams
	}
	if k.v2 && regions && d.Client != noRegions {
		v, err := k.ch.cfg.Screens.WatchRegions(d.ID, rs)
		if err != nil {
			return nil, err
		}
		s := &regionStream{k: k, v: v, timer: time.NewTimer(time.Hour), refreshing: true}
		s.timer.Stop()
		k.mu.Lock()
		k.rviewer = v
		k.mu.Unlock()
		return s, nil
	}
	v, err := k.ch.cfg.Screens.Watch(d.ID, d.Client)
	if err != nil {
		return nil, err
	}
	return &frameStream{k: k, v: v}, nil
}

// frameStream is version 1: whole frames, the newest one only.
type frameStream struct {
	k   *conn
	v   *screen.Viewer
	hdr [frameHeaderLen]byte
}

func (s *frameStream) ready() <-chan struct{} { return s.v.Ready() }
func (s *frameStream) done() <-chan struct{}  { return s.v.Done() }
func (s *frameStream) err() error             { return s.v.Err() }
func (s *frameStream) held() <-chan time.Time { return nil }
func (s *frameStream) resume() error          { return s.send() }
func (s *frameStream) close()                 { s.v.Close() }

func (s *frameStream) send() error {
	f, ok := s.v.Take()
	if !ok {
		return nil
	}
	return s.k.writeFrame(&s.hdr, f)
}

// writeFrame sends one binary frame: the header (docs/computer-protocol.md) and the image.
func (k *conn) writeFrame(hdr *[frameHeaderLen]byte, f guest.Frame) error {
	enc := byte(frameJPEG)
	if f.Format == "png" {
		enc = framePNG
	}
	copy(hdr[0:4], frameMagic)
	hdr[4], hdr[5], hdr[6], hdr[7] = frameVersion, frameHeaderLen, enc, 0
	binary.BigEndian.PutUint64(hdr[8:], f.ID)
	binary.BigEndian.PutUint32(hdr[16:], uint32(f.Width))
	binary.BigEndian.PutUint32(hdr[20:], uint32(f.Height))
	// The frame counts as sent before its bytes can reach the client: a client that answers
	// at once must not race this bookkeeping (a failed write ends the connection anyway).
	k.sent(f.ID)
	k.ws.SetWriteDeadline(time.Now().Add(k.ch.cfg.WriteTimeout))
	w, err := k.ws.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return err
	}
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := w.Write(f.Data); err != nil {
		return err
	}
	return w.Close()
}

// regionStream is version 2: region updates queued and merged by the hub's viewer, written
// under per-viewer flow control (screen.Flow).
type regionStream struct {
	k       *conn
	v       *screen.RegionViewer
	flow    screen.Flow
	scratch []computerwire.Region
	timer   *time.Timer // runs while flow control holds updates back
	heldOn  bool
	// skippedRefresh: lossless refreshes were skipped for this viewer (its link was
	// behind); its picture is not exact until a keyframe.
	skippedRefresh bool
	askedKey       bool // a keyframe was asked for to end skippedRefresh
	refreshing     bool // the viewer takes lossless refreshes (screen.RegionViewer.SetRefresh)
}

func (s *regionStream) ready() <-chan struct{} { return s.v.Ready() }
func (s *regionStream) done() <-chan struct{}  { return s.v.Done() }
func (s *regionStream) err() error             { return s.v.Err() }

func (s *regionStream) held() <-chan time.Time {
	if !s.heldOn {
		return nil
	}
	return s.timer.C
}

func (s *regionStream) close() {
	s.timer.Stop()
	s.v.Close()
	s.k.mu.Lock()
	s.k.rviewer = nil
	s.k.mu.Unlock()
}

func (s *regionStream) resume() error {
	s.heldOn = false
	return s.send()
}

// send writes what the region viewer holds, unless flow control says to wait.
func (s *regionStream) send() error {
	k, rviewer := s.k, s.v
	now := time.Now()
	_, waiting := rviewer.Pending()
	if waiting > 0 && !s.flow.Allow(now, unacked(k.ws.NetConn())) {
		if !s.heldOn {
			s.timer.Reset(10 * time.Millisecond)
			s.heldOn = true
		}
		// Updates wait (and merge); pointer messages are tiny and go anyway.
		b, ok := rviewer.TakePointer()
		if ok {
			_, err := k.writeBatch(b, &s.scratch, s.skippedRefresh)
			return err
		}
		return nil
	}
	b, ok := rviewer.Take()
	if !ok {
		return nil
	}
	// A viewer whose link is behind, or was lately, skips lossless refreshes: they only
	// repeat, exactly, pixels it has at its JPEG quality (its picture stays whole), and
	// on a slow link a refresh of a photo costs seconds. It tells the hub, so that the
	// driver makes none while no viewer takes them (issue 31 item 4). Once the link
	// keeps up at the best quality again, a keyframe brings the refreshes back.
	calm := s.flow.Calm(now)
	if calm != s.refreshing {
		s.refreshing = calm
		rviewer.SetRefresh(calm)
	}
	if !calm {
		if n := len(b.Updates); n > 0 {
			b.Updates = slices.DeleteFunc(b.Updates, func(u *guest.Update) bool { return u.Refresh && !u.Key })
			s.skippedRefresh = s.skippedRefresh || len(b.Updates) < n
		}
	} else if s.skippedRefresh && !s.askedKey && !s.heldOn {
		s.askedKey = true
		rviewer.Refresh()
	}
	if len(b.Updates) > 0 && b.Updates[0].Key {
		s.skippedRefresh, s.askedKey = false, false
	}
	n, err := k.writeBatch(b, &s.scratch, s.skippedRefresh)
	if err == nil && n > 0 {
		s.flow.Wrote(time.Now(), n, time.Since(now), len(b.Updates))
		if lv := s.flow.Level(); lv != rviewer.Level() {
			k.ch.log.Debug("computer channel: viewer quality level", "agent", k.agentID, "level", lv,
				"quality", screen.Levels[lv].Quality, "scale", screen.Levels[lv].Scale, "rate", int(s.flow.Rate()), "budget", s.flow.Budget(), "restarts", rviewer.Restarts())
			rviewer.SetLevel(lv)
		}
	}
	return err
}
