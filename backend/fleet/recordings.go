package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/nodes"
	"cubicle/backend/recording"
	"cubicle/runner/wire"
)

// The recordings of desktops on runners (docs/recording.md "Runners"). A runner that
// advertises wire.CapRecording records its desktops itself, on its disk, with the retention
// the administrator set for its node; the server makes no recording of them (no region
// stream crosses the link while nobody watches), sends it the markers it makes (tool calls,
// turns, takeovers) and reads its recordings on demand for the API. An older runner's
// desktops are recorded by the server through the link, as before.

// RecordsHere reports whether the server records node's desktops (recording.Config.Here):
// its own, and those of a runner that does not record its own.
func (f *Fleet) RecordsHere(node string) bool {
	if node == "" || node == nodes.LocalID || (f.cfg.Local != nil && node == f.cfg.Local.NodeID()) {
		return true
	}
	r, err := f.cfg.Runners.Node(node)
	return err != nil || !r.Records()
}

// ForwardMark sends a marker made here to the runner that records the desktop
// (recording.Config.Forward).
func (f *Fleet) ForwardMark(ctx context.Context, node string, m nodeapi.RecordingMark) error {
	r, err := f.cfg.Runners.Node(node)
	if err != nil {
		return err
	}
	return r.RecordMark(ctx, m)
}

// PushRecordingSettings sends the administrator's recording settings for node to it
// (recording.Config.Push).
func (f *Fleet) PushRecordingSettings(ctx context.Context, node string, st nodeapi.RecordingSettings) error {
	r, err := f.cfg.Runners.Node(node)
	if err != nil {
		return err
	}
	return r.SetRecording(ctx, st)
}

// Recordings is the API's recordings (api.Recordings): the server's own, and those of the
// runner the agent is placed on, read over its link when asked. The server keeps no catalog
// of a runner's recordings: while the runner is offline they are not listed (the list
// answers 503 saying so). Methods are safe for concurrent use.
type Recordings struct {
	f     *Fleet
	local recording.Local
}

// Recordings returns the recordings of every node over local, the server's own.
func (f *Fleet) Recordings(local recording.Local) *Recordings {
	return &Recordings{f: f, local: local}
}

// runnerOf returns the runner agentID is placed on when it keeps recordings of its own
// desktops (connected or not: offline, its recordings cannot be read); nil for the server's
// node, a runner the server records (an older one), or an unknown agent.
func (rr *Recordings) runnerOf(agentID string) *nodes.Remote {
	vms, err := rr.f.AgentNode(agentID)
	if err != nil {
		return nil
	}
	r, ok := vms.(*nodes.Remote)
	if !ok || r.NodeID() == nodes.LocalID || !r.Recorded() {
		return nil
	}
	return r
}

// runner returns the runner that keeps recording i.
func (rr *Recordings) runner(i recording.Info) (*nodes.Remote, error) {
	return rr.f.cfg.Runners.Node(i.Runner)
}

// List is accountID's recordings listed under agentID, newest first: the server's and, when
// the agent is on a runner that records its own desktops, the runner's.
func (rr *Recordings) List(ctx context.Context, accountID, agentID string) ([]recording.Info, error) {
	list, _ := rr.local.List(ctx, accountID, agentID)
	r := rr.runnerOf(agentID)
	if r == nil {
		return list, nil
	}
	more, err := r.Recordings(ctx, accountID, agentID)
	if err != nil {
		return nil, recordingsUnavailable(err)
	}
	list = append(list, more...)
	slices.SortStableFunc(list, func(a, b recording.Info) int { return b.StartedAt.Compare(a.StartedAt) })
	return list, nil
}

// recordingsUnavailable says that a runner's recordings cannot be read now.
func recordingsUnavailable(err error) error {
	if errors.Is(err, fault.ErrUnavailable) {
		return fault.Unavailable("the recordings of this agent's desktop are kept on its runner, which cannot be reached now: %v", err)
	}
	return err
}

// Get returns recording id of accountID listed under agentID, the server's or its runner's.
func (rr *Recordings) Get(ctx context.Context, accountID, agentID, id string) (recording.Info, error) {
	i, err := rr.local.Get(ctx, accountID, agentID, id)
	if err == nil || !errors.Is(err, fault.ErrNotFound) {
		return i, err
	}
	r := rr.runnerOf(agentID)
	if r == nil {
		return i, err
	}
	i, err = r.Recording(ctx, wire.RecordingArgs{AccountID: accountID, AgentID: agentID, ID: id})
	return i, recordingsUnavailable(err)
}

// Lookup finds recording id listed under agentID whatever its account.
func (rr *Recordings) Lookup(ctx context.Context, agentID, id string) (recording.Info, error) {
	i, err := rr.local.Lookup(ctx, agentID, id)
	if err == nil || !errors.Is(err, fault.ErrNotFound) {
		return i, err
	}
	r := rr.runnerOf(agentID)
	if r == nil {
		return i, err
	}
	i, err = r.Recording(ctx, wire.RecordingArgs{AgentID: agentID, ID: id})
	return i, recordingsUnavailable(err)
}

// remoteArgs names recording i on its runner (the API has checked who may see it).
func remoteArgs(i recording.Info) wire.RecordingArgs {
	a := wire.RecordingArgs{ID: i.ID}
	if len(i.AgentIDs) > 0 {
		a.AgentID = i.AgentIDs[0]
	}
	return a
}

// Delete removes recording i where it is kept.
func (rr *Recordings) Delete(ctx context.Context, i recording.Info) error {
	if i.Runner == "" {
		return rr.local.Delete(ctx, i)
	}
	r, err := rr.runner(i)
	if err != nil {
		return err
	}
	return recordingsUnavailable(r.DeleteRecording(ctx, remoteArgs(i)))
}

// Screenshot returns the screenshot kept with marker n of recording i.
func (rr *Recordings) Screenshot(ctx context.Context, i recording.Info, n int) ([]byte, string, error) {
	if i.Runner == "" {
		return rr.local.Screenshot(ctx, i, n)
	}
	r, err := rr.runner(i)
	if err != nil {
		return nil, "", err
	}
	a := remoteArgs(i)
	a.Marker = n
	shot, err := r.RecordingShot(ctx, a)
	if err != nil {
		return nil, "", recordingsUnavailable(err)
	}
	return shot.Data, cmp.Or(shot.MediaType, "image/png"), nil
}

// Play relays a replay from the runner that keeps recording i: its messages to out as the
// player sends them, the viewer's controls to the runner.
func (rr *Recordings) Play(ctx context.Context, i recording.Info, from time.Duration, speed float64, ctrl <-chan recording.Control, out recording.Sink) error {
	if i.Runner == "" {
		return rr.local.Play(ctx, i, from, speed, ctrl, out)
	}
	r, err := rr.runner(i)
	if err != nil {
		return err
	}
	a := remoteArgs(i)
	a.FromMs, a.Speed = from.Milliseconds(), speed
	st, err := r.Replay(ctx, a)
	if err != nil {
		return recordingsUnavailable(err)
	}
	defer st.Close()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer func() { // the controls' goroutine ends with ctx
		cancel()
		wg.Wait()
	}()
	wg.Add(1)
	go func() { // the viewer's controls, to the runner
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case c := <-ctrl:
				raw, _ := json.Marshal(c)
				if wire.WriteFrame(st, json.RawMessage(raw)) != nil {
					cancel()
					return
				}
			}
		}
	}()
	for {
		var m wire.ReplayMessage
		if err := wire.ReadFrame(st, &m); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the replay from runner %s ended: %w", r.NodeID(), err)
		}
		kind := recording.KindText
		if m.Binary {
			kind = recording.KindUpdate
		}
		if err := out.Record(recording.Record{Kind: kind, Data: m.Data}); err != nil {
			return err
		}
	}
}

// Settings are the administrator's recording settings.
func (rr *Recordings) Settings() recording.Settings { return rr.local.Settings() }

// SetSettings saves the administrator's recording settings (recording.Service.SetSettings).
func (rr *Recordings) SetSettings(st recording.Settings) (recording.Settings, error) {
	return rr.local.SetSettings(st)
}

// Usage counts the server's own recordings (each runner keeps its own within the same
// limits).
func (rr *Recordings) Usage() (int, int64) { return rr.local.Usage() }
