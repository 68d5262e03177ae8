package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/recording"
	"cubicle/backend/screen"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// A runner records its own desktops (wire.CapRecording, docs/recording.md "Runners"): the
// recording service of backend/recording on <data>/recordings, one more viewer of each
// desktop's region stream through the runner's own link to its driver, so nothing crosses
// the server's link while nobody watches. The desktops' manager's changes go to the service
// through a small event bus of the runner's own; the server sends its markers
// (wire.RecordMark) and the administrator's retention for this node (wire.SetRecording), and
// reads the recordings on demand (wire.Recordings, Recording, RecordingShot, Replay,
// DeleteRecording).

// recorder is the runner's recording service and what it runs on. Built by New when the
// runner has an engine (not for the managed local runner: the server records its own node).
type recorder struct {
	svc     *recording.Service
	hubs    *screen.Hubs
	bus     *events.Bus
	node    string
	started sync.Once
	closed  sync.Once
}

// start follows the desktops and records those that run now (once: Run may be called again
// after an update failed to restart).
func (rec *recorder) start(ctx context.Context) {
	rec.started.Do(func() { rec.svc.Start(ctx) })
}

// buildRecorder makes the recording service (before the desktops' manager starts, so that
// it hears every change).
func (r *Runner) buildRecorder() error {
	log := r.log.With("svc", "recording")
	rec := &recorder{hubs: screen.New(screen.Config{Logger: log}), bus: events.New(events.Config{Logger: log}), node: r.nodeID}
	svc, err := recording.New(recording.Config{
		Dir: filepath.Join(r.cfg.DataDir, "recordings"), Screens: rec.hubs, Events: rec.bus, Logger: log,
		Link: func(ctx context.Context, id string) (screen.RegionSource, error) {
			c, err := r.vms.Link(ctx, id)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		Running:   r.runningDesktops,
		StopLabel: "the runner stopped",
	})
	if err != nil {
		rec.hubs.Close()
		rec.bus.Close()
		return fmt.Errorf("recordings: %w", err)
	}
	rec.svc = svc
	r.rec = rec
	r.hello.Capabilities = append(r.hello.Capabilities, wire.CapRecording)
	return nil
}

// change is the desktops' manager's change, for the recorder (it must return at once: the
// bus queues it).
func (rec *recorder) change(c vm.InstanceChange) {
	rec.bus.Publish(events.DesktopState, events.Audience{}, events.Desktop{InstanceID: c.InstanceID, NodeID: rec.node, Scope: c.Scope,
		AccountID: c.AccountID, AgentID: c.AgentID, State: c.State, Previous: c.Previous, LastError: c.LastError, Removed: c.Removed})
}

// close ends the recordings (their files closed) and what they ran on. Idempotent.
func (rec *recorder) close() error {
	var err error
	rec.closed.Do(func() {
		err = rec.svc.Close()
		rec.hubs.Close()
		rec.bus.Close()
	})
	return err
}

// runningDesktops lists the runner's running desktops (recorded from the start).
func (r *Runner) runningDesktops(context.Context) []recording.Desktop {
	ins, err := r.st.VMInstances(r.nodeID)
	if err != nil {
		r.log.Warn("list running desktops to record", "err", err)
		return nil
	}
	var out []recording.Desktop
	for _, in := range ins {
		if in.State == vm.StateRunning {
			out = append(out, recording.Desktop{ID: in.ID, Node: r.nodeID, AccountID: in.AccountID, AgentID: in.AgentID})
		}
	}
	return out
}

// recordings returns the recording service, or why this runner has none.
func (r *Runner) recordings() (*recording.Service, error) {
	if r.rec == nil {
		return nil, fault.Unavailable("this runner does not record its desktops (it has no desktop engine)")
	}
	return r.rec.svc, nil
}

// recordingOf returns the recording a names, scoped as wire.RecordingArgs says.
func (r *Runner) recordingOf(a wire.RecordingArgs) (*recording.Service, recording.Info, error) {
	svc, err := r.recordings()
	if err != nil {
		return nil, recording.Info{}, err
	}
	if a.AccountID != "" {
		i, err := svc.Get(a.AccountID, a.AgentID, a.ID)
		return svc, i, err
	}
	i, err := svc.Lookup(a.ID)
	if err == nil && !slices.Contains(i.AgentIDs, a.AgentID) {
		err = fault.NotFound("recording %q not found", a.ID)
	}
	return svc, i, err
}

// recordingHandlers adds the recording ops to the dispatch table.
func (r *Runner) recordingHandlers(add func(wire.Spec, handler)) {
	add(wire.RecordMark.Spec, unary(wire.RecordMark, func(_ context.Context, m nodeapi.RecordingMark) (bool, error) {
		svc, err := r.recordings()
		if err != nil {
			return false, err
		}
		if m.DesktopID == "" || len(m.Shot) > 16<<20 {
			return false, fault.Invalid("a marker names its desktop, and its screenshot is at most 16 MiB")
		}
		svc.AddMark(m)
		return true, nil
	}))
	add(wire.SetRecording.Spec, unary(wire.SetRecording, func(_ context.Context, ns nodeapi.RecordingSettings) (bool, error) {
		svc, err := r.recordings()
		if err != nil {
			return false, err
		}
		st := recording.Settings{KeepDays: ns.KeepDays, MaxBytes: ns.MaxBytes, NeverRecord: []string{}}
		if !ns.Record {
			st.NeverRecord = []string{r.nodeID}
		}
		cur := svc.Settings()
		if cur.KeepDays == st.KeepDays && cur.MaxBytes == st.MaxBytes && slices.Equal(cur.NeverRecord, st.NeverRecord) {
			return true, nil
		}
		_, err = svc.SetSettings(st)
		return err == nil, err
	}))
	add(wire.Recordings.Spec, unary(wire.Recordings, func(_ context.Context, a wire.RecordingArgs) ([]nodeapi.Recording, error) {
		svc, err := r.recordings()
		if err != nil {
			return nil, err
		}
		if a.AccountID == "" || a.AgentID == "" {
			return nil, fault.Invalid("a listing of recordings names its account and agent")
		}
		return svc.List(a.AccountID, a.AgentID), nil
	}))
	add(wire.Recording.Spec, unary(wire.Recording, func(_ context.Context, a wire.RecordingArgs) (nodeapi.Recording, error) {
		_, i, err := r.recordingOf(a)
		return i, err
	}))
	add(wire.DeleteRecording.Spec, unary(wire.DeleteRecording, func(_ context.Context, a wire.RecordingArgs) (bool, error) {
		svc, i, err := r.recordingOf(a)
		if err != nil {
			return false, err
		}
		return true, svc.Delete(i.ID)
	}))
	add(wire.RecordingShot.Spec, unary(wire.RecordingShot, func(_ context.Context, a wire.RecordingArgs) (nodeapi.RecordingShot, error) {
		svc, i, err := r.recordingOf(a)
		if err != nil {
			return nodeapi.RecordingShot{}, err
		}
		data, typ, err := svc.ScreenshotData(i.ID, a.Marker)
		return nodeapi.RecordingShot{MediaType: typ, Data: data}, err
	}))
	add(wire.Replay.Spec, r.serveReplay)
}

// serveReplay answers wire.OpReplay: the replay's messages as frames, the viewer's controls
// read from the stream, until the replay ends, the server closes the stream or the session
// ends.
func (r *Runner) serveReplay(ctx context.Context, st net.Conn, req wire.Request) {
	a, err := wire.Replay.Args(req)
	var svc *recording.Service
	var i recording.Info
	if err == nil {
		svc, i, err = r.recordingOf(a)
	}
	if err == nil && a.Speed != 0 {
		if cerr := recording.CheckSpeed(a.Speed); cerr != nil {
			err = fault.Invalid("%v", cerr)
		}
	}
	if err == nil && a.FromMs < 0 {
		err = fault.Invalid("fromMs is a time in the recording in milliseconds (0 or more)")
	}
	if err != nil {
		wire.WriteFrame(st, wire.Replay.Response(false, err))
		return
	}
	if err := wire.WriteFrame(st, wire.Replay.Response(true, nil)); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctrl := make(chan recording.Control, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the viewer's controls; the stream's end ends the replay
		defer wg.Done()
		defer cancel()
		for {
			var raw json.RawMessage
			if err := wire.ReadFrame(st, &raw); err != nil {
				return
			}
			var c recording.Control
			if json.Unmarshal(raw, &c) != nil {
				continue
			}
			select {
			case ctrl <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := svc.Play(ctx, i.ID, time.Duration(a.FromMs)*time.Millisecond, a.Speed, ctrl, frameSink{st}); err != nil && ctx.Err() == nil {
		r.log.Warn("recording replay", "recording", i.ID, "err", err)
	}
	st.Close()
	cancel()
	wg.Wait()
}

// frameSink writes a player's output as wire.ReplayMessage frames.
type frameSink struct{ st net.Conn }

func (k frameSink) Record(rec recording.Record) error {
	k.st.SetWriteDeadline(time.Now().Add(wire.WriteTimeout))
	return wire.WriteFrame(k.st, wire.ReplayMessage{Binary: rec.Kind == recording.KindUpdate, Data: rec.Data})
}

func (k frameSink) Position(p recording.Position) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	k.st.SetWriteDeadline(time.Now().Add(wire.WriteTimeout))
	return wire.WriteFrame(k.st, wire.ReplayMessage{Data: raw})
}
