package backend

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"cubicle/backend/agent"
	"cubicle/backend/recording"
	"cubicle/backend/screen"
	"cubicle/runner/wire"
)

// This file wires the desktops' recordings (backend/recording, docs/recording.md): the
// recorder watches each running desktop's shared region stream, and the chat's tool calls
// become its markers.

// buildRecordings makes the recording service on <data>/recordings.
func (b *Backend) buildRecordings() error {
	var err error
	b.Recordings, err = recording.New(recording.Config{
		Dir: filepath.Join(b.cfg.DataDir, "recordings"), Screens: b.Screens, Events: b.Events,
		Logger: b.log.With("svc", "recording"),
		Link: func(ctx context.Context, id string) (screen.RegionSource, error) {
			c, err := b.fleet.Desktop(id).Link(ctx, id)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		Running: b.runningDesktops,
		// A runner with wire.CapRecording records its own desktops: the server only sends
		// it the markers it makes and its settings (fleet/recordings.go).
		Here:    b.fleet.RecordsHere,
		Forward: b.fleet.ForwardMark,
		Remotes: func() []string { return b.Nodes.ConnectedWith(wire.CapRecording) },
		Push:    b.fleet.PushRecordingSettings,
	})
	if err != nil {
		return err
	}
	// The API's recordings: the server's own, and a runner's read over its link.
	b.recs = b.fleet.Recordings(recording.Local{Service: b.Recordings})
	return nil
}

// runningDesktops lists the local node's running desktops (recorded from the start).
func (b *Backend) runningDesktops(context.Context) []recording.Desktop {
	node := b.nodeID()
	ins, err := b.Store.VMInstances(node)
	if err != nil {
		b.log.Warn("list running desktops to record", "err", err)
		return nil
	}
	var out []recording.Desktop
	for _, in := range ins {
		if in.State == "running" {
			out = append(out, recording.Desktop{ID: in.ID, Node: node, AccountID: in.AccountID, AgentID: in.AgentID})
		}
	}
	return out
}

// recordedRuns is the runtime's Recorder: the tool history first, then a marker in the
// recording of the desktop the agent works on (with the screenshot the agent received).
type recordedRuns struct {
	agent.Recorder
	b *Backend
}

func (r recordedRuns) Begin(t agent.TurnInfo, call agent.ToolCall) string {
	id := r.Recorder.Begin(t, call)
	if rec := r.b.Recordings; rec != nil && t.AgentID != "" {
		rec.ToolBegan(t.AgentID, id, call.Name, toolLabel(call))
	}
	return id
}

func (r recordedRuns) End(id string, end agent.RunEnd) {
	r.Recorder.End(id, end)
	if rec := r.b.Recordings; rec != nil {
		typ, data := lastImage(end.Output)
		rec.ToolEnded(id, end.State, typ, data)
	}
}

// toolLabel is a short label of a call: the tool and its main arguments.
func toolLabel(call agent.ToolCall) string {
	label := call.Name
	keys := make([]string, 0, len(call.Input))
	for k := range call.Input {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	if a, ok := call.Input["action"].(string); ok {
		parts = append(parts, a)
	}
	for _, k := range keys {
		if k == "action" {
			continue
		}
		switch v := call.Input[k].(type) {
		case string, float64, bool:
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		case []any:
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if len(parts) > 0 {
		label += ": " + strings.Join(parts, " ")
	}
	if r := []rune(label); len(r) > 80 {
		label = string(r[:79]) + "…"
	}
	return label
}

// lastImage is the last image of a tool's output (the screenshot the agent received).
func lastImage(bs []agent.ContentBlock) (mediaType, data string) {
	for i := len(bs) - 1; i >= 0; i-- {
		b := bs[i]
		if b.Type == "image" && b.Data != "" {
			return b.MediaType, b.Data
		}
		if t, d := lastImage(b.Content); d != "" {
			return t, d
		}
	}
	return "", ""
}
