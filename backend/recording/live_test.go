package recording

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jezek/xgb"

	"cubicle/backend/guest"
	"cubicle/backend/screen"
	"cubicle/backend/screen/screentest"
)

// Displays :150 to :154 belong to this package's tests.

func TestMain(m *testing.M) {
	xgb.Logger = log.New(io.Discard, "", 0)
	code := m.Run()
	screentest.Cleanup()
	os.Exit(code)
}

// recorderOn returns a Service recording the real driver of d (desktop "desk-1") into dir: a
// keyframe due every 2 s of change, a segment ending at the first full keyframe 3 s or more
// after its start. (With 4 s the first new segment could come only with the keyframe due
// at ~6 s, which a loaded CI machine pushed past the test's 8 s of recording: one segment.)
func recorderOn(t *testing.T, dir string, hubs *screen.Hubs, d *screentest.Desktop) *Service {
	t.Helper()
	s, err := New(Config{Dir: dir, Screens: hubs, Logger: testLogger(t), KeyEvery: 2 * time.Second, SegmentEvery: 3 * time.Second,
		Link: func(context.Context, string) (screen.RegionSource, error) { return d.Client, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// similar compares two pictures with a tolerance for JPEG (the recorder keeps the JPEG
// regions the live view starts with): the mean difference of a colour channel, and the share
// of pixels whose colour differs by more than 48 in a channel.
func similar(a, b image.Image) (mean, share float64, ok bool) {
	if a.Bounds().Size() != b.Bounds().Size() {
		return 255, 1, false
	}
	bad, n := 0, 0
	var sum uint64
	ab, bb := a.Bounds(), b.Bounds()
	for y := 0; y < ab.Dy(); y++ {
		for x := 0; x < ab.Dx(); x++ {
			r1, g1, b1, _ := a.At(ab.Min.X+x, ab.Min.Y+y).RGBA()
			r2, g2, b2, _ := b.At(bb.Min.X+x, bb.Min.Y+y).RGBA()
			d := max(absDiff(r1>>8, r2>>8), absDiff(g1>>8, g2>>8), absDiff(b1>>8, b2>>8))
			if d > 48 {
				bad++
			}
			sum += uint64(absDiff(r1>>8, r2>>8) + absDiff(g1>>8, g2>>8) + absDiff(b1>>8, b2>>8))
			n++
		}
	}
	mean, share = float64(sum)/float64(3*n), float64(bad)/float64(n)
	return mean, share, mean <= 4 && share <= 0.05
}

func absDiff(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return b - a
}

// canvasAt rebuilds the screen from the records a seek returned.
func canvasAt(t *testing.T, recs []Record) *screentest.Canvas {
	t.Helper()
	var c screentest.Canvas
	for _, r := range recs {
		if r.Kind != KindUpdate {
			continue
		}
		u, err := screentest.ParseUpdate(r.Data)
		if err != nil {
			t.Fatalf("a recorded update does not parse: %v", err)
		}
		if err := c.Apply(u); err != nil {
			t.Fatalf("a recorded update does not apply: %v", err)
		}
	}
	if c.Img == nil {
		t.Fatal("the seek drew nothing")
	}
	return &c
}

func decodeShot(t *testing.T, f guest.Frame) image.Image {
	t.Helper()
	var img image.Image
	var err error
	if f.Format == "png" {
		img, err = png.Decode(bytes.NewReader(f.Data))
	} else {
		img, err = jpeg.Decode(bytes.NewReader(f.Data))
	}
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestRecordAndReplayTheRealScreen records a real driver's screen while it changes, takes
// screenshots at known moments, and checks that a replay from each moment draws what the
// screenshot showed.
func TestRecordAndReplayTheRealScreen(t *testing.T) {
	d := screentest.Start(t, 150, 640, 400)
	p := screentest.NewPainter(t, d)
	hubs := screen.New(screen.Config{Logger: testLogger(t)})
	t.Cleanup(func() { hubs.Close() })
	dir := t.TempDir()
	s := recorderOn(t, dir, hubs, d)
	s.StartDesktop(Desktop{ID: "desk-1", Node: "local", AccountID: "acc", AgentID: "a1"})
	id := s.Recording("desk-1")
	if id == "" {
		t.Fatal("no recording started")
	}
	// A live viewer watches too: the recorder shares its stream (one hub, two viewers).
	live, err := hubs.WatchRegions("desk-1", d.Client)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	ctx := context.Background()
	type moment struct {
		at  time.Duration
		img image.Image
	}
	var moments []moment
	info, _ := s.cat.get(id)
	for i := range 6 {
		p.Fill((i%3)*200, (i/3)*150, 180, 140)
		p.Noise(20, 320, 300, 60)
		// Wait until the shared stream has captured the change (on a loaded machine it lags
		// the screen): from then on the screen stands still until the next change.
		changed := time.Now()
		for seen := false; !seen; {
			select {
			case <-live.Ready():
			case <-time.After(30 * time.Second):
				t.Fatal("the stream never showed the change")
			}
			if bt, ok := live.Take(); ok {
				for _, u := range bt.Updates {
					seen = seen || u.Captured.After(changed)
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
		f, err := d.Client.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Since(info.StartedAt)
		if !f.Captured.IsZero() {
			at = f.Captured.Sub(info.StartedAt) // the recording is timed by capture too
		}
		moments = append(moments, moment{at, decodeShot(t, f)})
		time.Sleep(700 * time.Millisecond)
	}
	if n := hubs.RegionViewers("desk-1"); n != 2 {
		t.Errorf("%d region viewers of the desktop, want 2 (the live view and the recorder on one stream)", n)
	}
	// The tool-call marker path: the agent's screenshot is kept with the marker.
	s.ToolBegan("a1", "run-1", "computer", "screenshot")
	s.ToolEnded("run-1", "success", "image/png", "iVBORw0KGgo=")
	s.StopDesktop("desk-1", "the desktop stopped (stopped)")
	got, err := s.Get("acc", "a1", id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recording: %d ms, %d bytes, %d keyframes, %d markers", got.DurationMs, got.Bytes, got.Keyframes, len(got.Markers))
	// The recording covers every moment shot (its duration is timed by capture, like the moments).
	if last := moments[len(moments)-1].at.Milliseconds(); got.Live || got.Keyframes < 3 || got.Bytes == 0 || got.DurationMs < last {
		t.Errorf("recording %+v: want ended, keyframes every 2 s of change, bytes, at least %d ms", got, last)
	}
	segs, _ := listSegments(filepath.Join(dir, id))
	if len(segs) < 2 {
		t.Errorf("%d segments in %d ms, want a new one every 3 s", len(segs), got.DurationMs)
	}
	var tool *Marker
	for i, m := range got.Markers {
		if m.Kind == MarkTool {
			tool = &got.Markers[i]
			if path, typ, err := s.Screenshot(id, i); err != nil || typ != "image/png" {
				t.Errorf("marker screenshot: %s %s %v", path, typ, err)
			}
		}
	}
	if tool == nil || tool.RunID != "run-1" || tool.AgentID != "a1" || !tool.Screenshot {
		t.Errorf("tool marker %+v", tool)
	}
	if last := got.Markers[len(got.Markers)-1]; last.Kind != MarkDesktop || last.Label != "the desktop stopped (stopped)" {
		t.Errorf("last marker %+v, want the stop", last)
	}
	for i, m := range moments {
		r, err := s.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := r.Seek(m.at)
		r.Close()
		if err != nil {
			t.Fatalf("seek %v: %v", m.at, err)
		}
		c := canvasAt(t, recs)
		mean, share, ok := similar(c.Img, m.img)
		t.Logf("moment %d (%v): mean difference %.2f, %.1f%% of the pixels differ by more than 48", i, m.at, mean, 100*share)
		if !ok {
			t.Errorf("moment %d (%v): the replay differs from the screenshot (mean %.2f, %.1f%% of the pixels)", i, m.at, mean, 100*share)
		}
		if i > 0 {
			// The comparison tells moments apart: the screenshot before this one is not it.
			if mean, share, ok := similar(c.Img, moments[i-1].img); ok {
				t.Errorf("moment %d's replay passes for moment %d's screenshot too (mean %.2f, %.1f%%)", i, i-1, mean, 100*share)
			}
		}
	}
}

// TestKilledRecorderLosesAtMostTwoSeconds runs the recorder in a child process (on this
// test's real driver), kills it with SIGKILL while the screen changes, and checks that what
// is on disk plays up to at most 2 s before the kill.
func TestKilledRecorderLosesAtMostTwoSeconds(t *testing.T) {
	if sock := os.Getenv("CUBICLE_RECORDING_CHILD"); sock != "" {
		recordUntilKilled(t, sock, os.Getenv("CUBICLE_RECORDING_DIR"))
		return
	}
	d := screentest.Start(t, 151, 320, 200)
	p := screentest.NewPainter(t, d)
	actx, stop := context.WithCancel(context.Background())
	defer stop()
	go p.Animate(actx, 50*time.Millisecond)
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledRecorderLosesAtMostTwoSeconds$", "-test.v", "-test.timeout", "2m")
	cmd.Env = append(os.Environ(), "CUBICLE_RECORDING_CHILD="+d.Socket, "CUBICLE_RECORDING_DIR="+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	childLog := func() string { raw, _ := os.ReadFile(logf.Name()); return string(raw) }
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "recording")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the child never started recording:\n%s", childLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(5 * time.Second)
	killedAt := time.Now()
	cmd.Process.Kill()
	cmd.Wait()
	s := newService(t, filepath.Join(dir, "recordings"))
	all := s.List("acc", "a1")
	if len(all) != 1 {
		t.Fatalf("%d recordings after the kill, want 1\n%s", len(all), childLog())
	}
	i := all[0]
	lost := killedAt.Sub(i.StartedAt) - time.Duration(i.DurationMs)*time.Millisecond
	t.Logf("killed after %v; the recording holds %d ms (lost %v), %d keyframes; notes %q", killedAt.Sub(i.StartedAt), i.DurationMs, lost, i.Keyframes, i.Notes)
	if lost > 2*time.Second {
		t.Errorf("a kill -9 lost %v of the recording, want at most 2 s", lost)
	}
	r, _ := s.Open(i.ID)
	defer r.Close()
	recs, err := r.Seek(time.Duration(i.DurationMs) * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	canvasAt(t, recs)
	for {
		if _, err := r.Next(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("reading to the end: %v", err)
			}
			break
		}
	}
}

// recordUntilKilled is the child of TestKilledRecorderLosesAtMostTwoSeconds: it records the
// parent's driver until it is killed.
func recordUntilKilled(t *testing.T, sock, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := guest.WaitReady(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	hubs := screen.New(screen.Config{})
	s, err := New(Config{Dir: filepath.Join(dir, "recordings"), Screens: hubs,
		Link: func(context.Context, string) (screen.RegionSource, error) { return c, nil }})
	if err != nil {
		t.Fatal(err)
	}
	s.StartDesktop(Desktop{ID: "desk-1", Node: "local", AccountID: "acc", AgentID: "a1"})
	os.WriteFile(filepath.Join(dir, "recording"), nil, 0o600)
	<-ctx.Done() // until killed
}

// BenchmarkReplaySeek records a real driver's 1280x800 screen (flat, with a 400x300 picture of
// noise) while a clock-sized area
// changes ten times a second (a terminal printing the time) and a band scrolls now and then,
// reports the recording's size per hour (MB/h), and times seeks to random moments: the
// keyframe before the moment and the updates up to it read and decoded, as the player draws
// them (ns/op). The cubicle bench rows record_bytes_terminal and replay_seek measure the same
// on a real desktop.
func BenchmarkReplaySeek(b *testing.B) {
	d := screentest.Start(b, 152, 1280, 800)
	p := screentest.NewPainter(b, d)
	hubs := screen.New(screen.Config{})
	defer hubs.Close()
	dir := b.TempDir()
	s, err := New(Config{Dir: dir, Screens: hubs,
		Link: func(context.Context, string) (screen.RegionSource, error) { return d.Client, nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p.Fill(0, 0, 1280, 800)
	p.Noise(700, 300, 400, 300) // a picture on the screen
	s.StartDesktop(Desktop{ID: "desk-1", Node: "local", AccountID: "acc", AgentID: "a1"})
	id := s.Recording("desk-1")
	t0 := time.Now()
	for i := 0; time.Since(t0) < 25*time.Second; i++ {
		p.Fill(100+(i%8)*12, 100, 12, 16) // a few characters of a clock
		time.Sleep(100 * time.Millisecond)
	}
	s.StopDesktop("desk-1", "done")
	info, _ := s.Get("acc", "a1", id)
	var seek time.Duration
	var drawn int
	for b.Loop() {
		st := time.Now()
		r, err := s.Open(id)
		if err != nil {
			b.Fatal(err)
		}
		recs, err := r.Seek(time.Duration(rand.Int64N(info.DurationMs)) * time.Millisecond)
		r.Close()
		if err != nil {
			b.Fatal(err)
		}
		seek += time.Since(st)
		drawn += len(recs)
		var c screentest.Canvas
		for _, rec := range recs {
			if rec.Kind == KindUpdate {
				u, err := screentest.ParseUpdate(rec.Data)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Apply(u); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.ReportMetric(float64(info.Bytes)/1e6/(time.Duration(info.DurationMs)*time.Millisecond).Hours(), "MB/h")
	b.ReportMetric(float64(info.Keyframes), "keyframes")
	b.ReportMetric(float64(seek.Milliseconds())/float64(b.N), "seek-ms/op")
	b.ReportMetric(float64(drawn)/float64(b.N), "records/op")
}
