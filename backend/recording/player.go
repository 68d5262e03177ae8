package recording

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Control is a player's message from the client (docs/recording.md): seek to At (ms), set the
// Speed, pause or play.
type Control struct {
	Type  string  `json:"type"` // seek | speed | pause | play
	At    int64   `json:"at,omitempty"`
	Speed float64 `json:"speed,omitempty"`
}

// Position is the player's text message to the client: where the replay is.
type Position struct {
	Type       string   `json:"type"`  // replay
	State      string   `json:"state"` // playing | paused | ended
	At         int64    `json:"at"`    // ms since the recording started
	Speed      float64  `json:"speed"`
	DurationMs int64    `json:"durationMs"`
	Live       bool     `json:"live,omitempty"`
	Notes      []string `json:"notes,omitempty"` // damaged parts skipped since the last position
	// Seeked: the records just sent drew the screen as it was at At (after a seek).
	Seeked bool `json:"seeked,omitempty"`
}

// Speeds a player accepts.
const (
	MinSpeed = 0.25
	MaxSpeed = 16.0
)

// CheckSpeed refuses a speed outside [MinSpeed, MaxSpeed].
func CheckSpeed(v float64) error {
	if v < MinSpeed || v > MaxSpeed {
		return fmt.Errorf("speed %g: use %g to %g", v, MinSpeed, MaxSpeed)
	}
	return nil
}

// Sink receives what a player sends: records (the computer channel's messages) and position
// messages (JSON).
type Sink interface {
	Record(r Record) error
	Position(p Position) error
}

// Play plays recording id into out from from at speed, until ctx ends or out fails, obeying
// ctrl. At the end it sends an ended position and waits for a seek.
func (s *Service) Play(ctx context.Context, id string, from time.Duration, speed float64, ctrl <-chan Control, out Sink) error {
	r, err := s.Open(id)
	if err != nil {
		return err
	}
	defer r.Close()
	if speed == 0 {
		speed = 1
	}
	var (
		anchorAt   time.Duration // recording time at anchorWall
		anchorWall time.Time
		paused     bool
		ended      bool
		lastPos    time.Time
	)
	info := func() Info { i, _ := s.cat.get(id); return i }
	pos := func() time.Duration {
		if paused || ended {
			return anchorAt
		}
		return anchorAt + time.Duration(float64(time.Since(anchorWall))*speed)
	}
	position := func(seeked bool) error {
		i := info()
		st := "playing"
		switch {
		case ended:
			st = "ended"
		case paused:
			st = "paused"
		}
		lastPos = time.Now()
		return out.Position(Position{Type: "replay", State: st, At: pos().Milliseconds(), Speed: speed,
			DurationMs: i.DurationMs, Live: i.Live, Notes: r.Notes(), Seeked: seeked})
	}
	seek := func(at time.Duration) error {
		at = max(at, 0)
		recs, err := r.Seek(at)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if err := out.Record(rec); err != nil {
				return err
			}
		}
		anchorAt, anchorWall, ended = at, time.Now(), false
		return position(true)
	}
	apply := func(c Control) (reseek bool, err error) {
		cur := pos()
		switch strings.ToLower(c.Type) {
		case "seek":
			return true, seek(time.Duration(c.At) * time.Millisecond)
		case "speed":
			if CheckSpeed(c.Speed) == nil {
				anchorAt, anchorWall, speed = cur, time.Now(), c.Speed
			}
		case "pause":
			anchorAt, paused = cur, true
		case "play":
			anchorAt, anchorWall, paused = cur, time.Now(), false
			if ended {
				return true, seek(0)
			}
		}
		return false, position(false)
	}
	if err := seek(from); err != nil {
		return err
	}
	var next *Record
	for {
		if next == nil && !ended && !paused {
			rec, err := r.Next()
			switch {
			case err == nil:
				next = &rec
			case errors.Is(err, io.EOF):
				anchorAt, ended = max(pos(), time.Duration(info().DurationMs)*time.Millisecond), true
				if err := position(false); err != nil {
					return err
				}
			case errors.Is(err, ErrLater):
			default:
				return err
			}
		}
		var wait time.Duration
		switch {
		case ended || paused:
			wait = time.Hour
		case next == nil:
			wait = 200 * time.Millisecond // a recording being written: more comes
		default:
			wait = time.Duration(float64(next.At-pos()) / speed)
		}
		if wait > 0 {
			if !ended && !paused && time.Since(lastPos) >= 250*time.Millisecond && next != nil {
				if err := position(false); err != nil {
					return err
				}
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case c, ok := <-ctrl:
				t.Stop()
				if !ok {
					return nil
				}
				reseek, err := apply(c)
				if err != nil {
					return err
				}
				if reseek {
					next = nil
				}
				continue
			case <-t.C:
				if next == nil {
					continue
				}
			}
		}
		if next != nil && next.At <= pos() {
			if err := out.Record(*next); err != nil {
				return err
			}
			next = nil
		}
	}
}
