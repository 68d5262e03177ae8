package nodes

import (
	"context"
	"encoding/json"
	"net"

	"cubicle/backend/nodeapi"
	"cubicle/runner/wire"
)

// The recordings of a runner that records its own desktops (wire.CapRecording,
// docs/recording.md "Runners"): markers made on the server go to it, and the server's
// recordings API reads its recordings on demand. A runner without the capability is refused
// before anything is sent (the server records its desktops itself).

// Records reports whether the runner's link is up and it records its own desktops.
func (r *Remote) Records() bool {
	c := r.h.conn(r.id)
	return c != nil && hasCap(c.hello, wire.CapRecording)
}

// Recorded reports whether the runner keeps recordings of its own desktops: it advertised
// wire.CapRecording on its live link or, while it is disconnected, when it last connected
// (its recordings are on it, unreachable until it is back).
func (r *Remote) Recorded() bool {
	if c := r.h.conn(r.id); c != nil {
		return hasCap(c.hello, wire.CapRecording)
	}
	rec, err := r.h.cfg.Store.Runner(r.id)
	var hello wire.Hello
	return err == nil && len(rec.Hello) > 0 && json.Unmarshal(rec.Hello, &hello) == nil && hasCap(hello, wire.CapRecording)
}

// RecordMark adds a marker made on the server to the recording of one of the runner's
// desktops.
func (r *Remote) RecordMark(ctx context.Context, m nodeapi.RecordingMark) error {
	_, err := call(ctx, r, wire.RecordMark, m)
	return err
}

// SetRecording sends the administrator's recording settings for this node.
func (r *Remote) SetRecording(ctx context.Context, s nodeapi.RecordingSettings) error {
	_, err := call(ctx, r, wire.SetRecording, s)
	return err
}

// Recordings lists accountID's recordings on the runner listed under agentID.
func (r *Remote) Recordings(ctx context.Context, accountID, agentID string) ([]nodeapi.Recording, error) {
	l, err := call(ctx, r, wire.Recordings, wire.RecordingArgs{AccountID: accountID, AgentID: agentID})
	for i := range l {
		l[i].Runner = r.id
	}
	return l, err
}

// Recording returns recording id on the runner (scoped as wire.RecordingArgs says).
func (r *Remote) Recording(ctx context.Context, a wire.RecordingArgs) (nodeapi.Recording, error) {
	i, err := call(ctx, r, wire.Recording, a)
	i.Runner = r.id
	return i, err
}

// DeleteRecording removes recording a.ID on the runner.
func (r *Remote) DeleteRecording(ctx context.Context, a wire.RecordingArgs) error {
	_, err := call(ctx, r, wire.DeleteRecording, a)
	return err
}

// RecordingShot returns the screenshot kept with marker a.Marker of recording a.ID.
func (r *Remote) RecordingShot(ctx context.Context, a wire.RecordingArgs) (nodeapi.RecordingShot, error) {
	return call(ctx, r, wire.RecordingShot, a)
}

// Replay starts replaying recording a.ID from a.FromMs at a.Speed: the stream then carries
// wire.ReplayMessage frames from the runner, and the viewer's controls as frames to it. The
// caller closes it.
func (r *Remote) Replay(ctx context.Context, a wire.RecordingArgs) (net.Conn, error) {
	st, _, err := relay(ctx, r, wire.Replay, a)
	return st, err
}
