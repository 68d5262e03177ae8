package backend

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"cubicle/backend/api"
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

// recordsHere reports whether the server records node's desktops: its own, and those of a
// runner that does not record its own.
func (b *Backend) recordsHere(node string) bool {
	if node == "" || node == nodes.LocalID || node == b.nodeID() || b.Nodes == nil {
		return true
	}
	r, err := b.Nodes.Node(node)
	return err != nil || !r.Records()
}

// forwardMark sends a marker made here to the runner that records the desktop.
func (b *Backend) forwardMark(ctx context.Context, node string, m nodeapi.RecordingMark) error {
	r, err := b.Nodes.Node(node)
	if err != nil {
		return err
	}
	return r.RecordMark(ctx, m)
}

// pushRecordingSettings sends the administrator's recording settings for node to it.
func (b *Backend) pushRecordingSettings(ctx context.Context, node string, st nodeapi.RecordingSettings) error {
	r, err := b.Nodes.Node(node)
	if err != nil {
		return err
	}
	return r.SetRecording(ctx, st)
}

// runnerRecordings is the API's recordings (api.Recordings): the server's own, and those of
// the runner the agent is placed on, read over its link when asked. The server keeps no
// catalog of a runner's recordings: while the runner is offline they are not listed (the
// list answers 503 saying so).
type runnerRecordings struct {
	b     *Backend
	local recording.Local
}

var _ api.Recordings = (*runnerRecordings)(nil)

// runnerOf returns the runner agentID is placed on when it keeps recordings of its own
// desktops (connected or not: offline, its recordings cannot be read); nil for the server's
// node, a runner the server records (an older one), or an unknown agent.
func (rr *runnerRecordings) runnerOf(agentID string) *nodes.Remote {
	vms, err := rr.b.fleet.AgentNode(agentID)
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
func (rr *runnerRecordings) runner(i recording.Info) (*nodes.Remote, error) {
	return rr.b.Nodes.Node(i.Runner)
}

func (rr *runnerRecordings) List(ctx context.Context, accountID, agentID string) ([]recording.Info, error) {
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

func (rr *runnerRecordings) Get(ctx context.Context, accountID, agentID, id string) (recording.Info, error) {
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

func (rr *runnerRecordings) Lookup(ctx context.Context, agentID, id string) (recording.Info, error) {
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

func (rr *runnerRecordings) Delete(ctx context.Context, i recording.Info) error {
	if i.Runner == "" {
		return rr.local.Delete(ctx, i)
	}
	r, err := rr.runner(i)
	if err != nil {
		return err
	}
	return recordingsUnavailable(r.DeleteRecording(ctx, remoteArgs(i)))
}

func (rr *runnerRecordings) Screenshot(ctx context.Context, i recording.Info, n int) ([]byte, string, error) {
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
func (rr *runnerRecordings) Play(ctx context.Context, i recording.Info, from time.Duration, speed float64, ctrl <-chan recording.Control, out recording.Sink) error {
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

func (rr *runnerRecordings) Settings() recording.Settings { return rr.local.Settings() }

func (rr *runnerRecordings) SetSettings(st recording.Settings) (recording.Settings, error) {
	return rr.local.SetSettings(st)
}

// Usage counts the server's own recordings (each runner keeps its own within the same
// limits).
func (rr *runnerRecordings) Usage() (int, int64) { return rr.local.Usage() }
