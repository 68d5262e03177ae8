// Package recording records agents' desktops and plays them back (issue 24,
// docs/recording.md).
//
// A Service keeps one recording per running desktop. The recorder is one more viewer of the
// desktop's shared region stream (screen.Hubs.WatchRegions): it adds no capture and no encode
// of its own — it writes the computer channel's version 2 messages (region updates, cursor
// and pointer) into segment files under the data directory, writes a keyframe at least every
// KeyEvery while the screen changes — a reference keyframe naming the recorded regions that
// paint the screen (keyref.go), or, at a segment's start, after a copy and on a resize, a
// whole-screen keyframe it asks the hub for — and flushes every FlushEvery so that a kill -9
// loses at most that much. Markers — tool calls with the screenshot the agent received,
// turns, takeovers and hand-backs, desktop start and stop — go to the recording of the
// desktop they concern. What a person types is never recorded as keystrokes: the pixels are
// what the screen showed.
//
// A desktop of a node that records its own (a runner with recording-v1: Config.Here) is not
// recorded here; the markers made here for it go to that node (Config.Forward), and so do its
// settings (Config.Push). Local adapts the Service to the API's recordings.
//
// Goroutines: the Service's follower (the event bus, settings, retention), its forwarder
// (markers and settings for other nodes, in order) and one per recording being written, all
// owned by the Service: Close cancels them and waits.
package recording

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/screen"
)

// Screens is the part of the screen hubs the recorder uses; *screen.Hubs satisfies it.
type Screens interface {
	WatchRegions(desktopID string, src screen.RegionSource) (*screen.RegionViewer, error)
}

// Desktop names a running desktop.
type Desktop struct {
	ID, Node, AccountID, AgentID string
}

// Config configures a Service. Dir, Screens and Link are required.
type Config struct {
	// Dir holds the recordings (<data>/recordings) and the settings file.
	Dir     string
	Screens Screens
	// Link returns the running desktop's driver connection: the same value the live view
	// watches through (so that both share one region stream).
	Link func(ctx context.Context, desktopID string) (screen.RegionSource, error)
	// Running lists the desktops that run now (at Start and when a node is switched back on);
	// nil: only desktops started later are recorded.
	Running func(ctx context.Context) []Desktop
	// Events is the event bus: desktop states start and stop recordings, control changes are
	// markers. Without it nothing starts by itself (tests call StartDesktop).
	Events interface {
		Subscribe(o events.SubscribeOptions) *events.Subscription
	}
	Logger *slog.Logger
	// KeyEvery is the longest stretch of changes between keyframes (DefaultKeyEvery);
	// FlushEvery how often written records reach the file (default 1 s); SegmentEvery how
	// long a segment covers before the next keyframe starts a new one (DefaultSegmentEvery).
	KeyEvery, FlushEvery, SegmentEvery time.Duration
	// SweepEvery is how often retention runs (default 10 min).
	SweepEvery time.Duration
	// Here reports whether this Service records the desktops of node (nil: every node). A
	// running desktop of another node (a runner that records its own) is remembered, and the
	// markers made here for it go to Forward.
	Here func(node string) bool
	// Forward sends a marker made here to the node that records the desktop (the runner's
	// link). It is called by the Service's forwarding goroutine, one at a time and in order,
	// and should give up after a few seconds; nil drops such markers.
	Forward func(ctx context.Context, node string, m nodeapi.RecordingMark) error
	// Remotes lists the connected nodes that record their own desktops, and Push sends one
	// of them its recording settings (what Settings say for that node): when it connects
	// (events.RunnerStatus) and after every change, by the forwarding goroutine. nil: none.
	Remotes func() []string
	Push    func(ctx context.Context, node string, st nodeapi.RecordingSettings) error
	// StopLabel is the last marker of the recordings Close ends (default "the server
	// stopped"; a runner says so of itself).
	StopLabel string
}

// Keyframe and segment defaults (docs/recording.md).
const (
	// DefaultKeyEvery: a seek never has more than this much of changes to play after its
	// keyframe. Between a segment's first keyframe and its end they are reference
	// keyframes (keyref.go), a few hundred bytes each.
	DefaultKeyEvery = 10 * time.Second
	// DefaultSegmentEvery: each segment starts with a full keyframe from the driver (a
	// whole screen: ~300 KB for an XFCE desktop), so a recording of an hour holds 12 of
	// them; a damaged segment loses at most the rest of its 5 minutes.
	DefaultSegmentEvery = 5 * time.Minute
)

// Service records desktops. Create it with New, Start it, Close it.
type Service struct {
	cfg Config
	log *slog.Logger
	cat *catalog

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sub    *events.Subscription

	mu        sync.Mutex
	active    map[string]*session  // guarded by mu; desktop id → its recording being written
	agentOn   map[string]string    // guarded by mu; agent id → the desktop it works on
	pending   map[string]toolBegan // guarded by mu; run id → its start
	elsewhere map[string]string    // guarded by mu; desktop id → the node that records it (Config.Here)
	settings  Settings             // guarded by mu
	closed    bool                 // guarded by mu

	forward chan forwarded // markers for desktops recorded elsewhere, to the forwarder
}

// forwarded is a marker on its way to the node that records its desktop, or (push) that
// node's settings.
type forwarded struct {
	node string
	mark nodeapi.RecordingMark
	made time.Time
	push bool
}

type toolBegan struct {
	agent, tool, label string
	at                 time.Time
}

// New opens the recordings under cfg.Dir (closing those a crash left open).
func New(cfg Config) (*Service, error) {
	if cfg.Dir == "" || cfg.Screens == nil || cfg.Link == nil {
		return nil, errors.New("recording: Config.Dir, Screens and Link are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.KeyEvery <= 0 {
		cfg.KeyEvery = DefaultKeyEvery
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = time.Second
	}
	if cfg.SegmentEvery <= 0 {
		cfg.SegmentEvery = DefaultSegmentEvery
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = 10 * time.Minute
	}
	if cfg.StopLabel == "" {
		cfg.StopLabel = "the server stopped"
	}
	cat, err := openCatalog(cfg.Dir, cfg.Logger)
	if err != nil {
		return nil, err
	}
	st, err := loadSettings(cfg.Dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{cfg: cfg, log: cfg.Logger, cat: cat, ctx: ctx, cancel: cancel, active: map[string]*session{},
		agentOn: map[string]string{}, pending: map[string]toolBegan{}, elsewhere: map[string]string{}, settings: st,
		forward: make(chan forwarded, 256)}, nil
}

// Start follows the event bus and records the desktops that run now.
func (s *Service) Start(ctx context.Context) error {
	if s.cfg.Events != nil {
		s.sub = s.cfg.Events.Subscribe(events.SubscribeOptions{Types: []events.Type{events.DesktopState, events.ControlChanged, events.RunnerStatus}, Buffer: 1024})
	}
	s.wg.Add(2)
	go s.follow()
	go s.forwarder()
	s.startRunning(ctx)
	return nil
}

// startRunning records every running desktop of a node that records.
func (s *Service) startRunning(ctx context.Context) {
	if s.cfg.Running == nil {
		return
	}
	for _, d := range s.cfg.Running(ctx) {
		s.StartDesktop(d)
	}
}

// Close stops every recording (closing its files) and waits. Idempotent.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	sessions := make([]*session, 0, len(s.active))
	for _, ss := range s.active {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	if s.sub != nil {
		s.sub.Close()
	}
	for _, ss := range sessions {
		ss.ending(s.cfg.StopLabel) // before the cancel below ends their writers
	}
	s.cancel()
	for _, ss := range sessions {
		ss.stop(s.cfg.StopLabel)
	}
	s.wg.Wait()
	return nil
}

// follow is the Service's goroutine: desktop states start and stop recordings, control
// changes become markers, and retention runs now and then.
func (s *Service) follow() {
	defer s.wg.Done()
	sweep := time.NewTicker(s.cfg.SweepEvery)
	defer sweep.Stop()
	s.Sweep()
	var in <-chan events.Event
	if s.sub != nil {
		in = s.sub.C()
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-sweep.C:
			s.Sweep()
		case e, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			switch d := e.Data.(type) {
			case events.Desktop:
				s.desktopEvent(d)
			case events.Control:
				s.controlEvent(d)
			case events.Runner:
				if d.State == events.RunnerConnected && !s.here(d.NodeID) {
					s.push(d.NodeID)
				}
			}
		}
	}
}

func (s *Service) desktopEvent(d events.Desktop) {
	if d.AgentID != "" && d.InstanceID != "" && !d.Removed {
		s.mu.Lock()
		s.agentOn[d.AgentID] = d.InstanceID
		s.mu.Unlock()
	}
	if !s.here(d.NodeID) {
		s.mu.Lock()
		if (d.State == "running" || d.State == "paused" || d.State == events.DesktopUnreachable) && !d.Removed {
			s.elsewhere[d.InstanceID] = d.NodeID
		} else {
			delete(s.elsewhere, d.InstanceID)
		}
		s.mu.Unlock()
		// Recorded here until now (its runner was older and was updated): the runner has it.
		s.StopDesktop(d.InstanceID, "the runner records this desktop itself from now on")
		return
	}
	switch {
	case d.State == "running" && !d.Removed:
		s.StartDesktop(Desktop{ID: d.InstanceID, Node: d.NodeID, AccountID: d.AccountID, AgentID: d.AgentID})
	case d.State == "paused", d.State == events.DesktopUnreachable:
		// still running somewhere: the stream ends by itself if it must
	default:
		why := "the desktop stopped (" + d.State + ")"
		if d.LastError != "" {
			why = "the desktop failed: " + d.LastError
		}
		s.StopDesktop(d.InstanceID, why)
	}
}

func (s *Service) controlEvent(c events.Control) {
	var label, kind string
	switch c.Kind {
	case "task_started":
		kind, label = MarkTurn, "turn started: "+c.Holder
		if c.AgentID != "" {
			s.mu.Lock()
			s.agentOn[c.AgentID] = c.DesktopID
			s.mu.Unlock()
		}
	case "task_ended":
		kind, label = MarkTurn, "turn ended: "+c.Holder
	case "taken":
		kind, label = MarkControl, c.Holder+" took over"
	case "handed_back":
		kind, label = MarkControl, c.Holder+" handed back"
	case "expired":
		kind, label = MarkControl, c.Holder+"'s control expired"
	case "revoked":
		kind, label = MarkControl, c.Holder+"'s control was revoked"
	default:
		return
	}
	s.mark(c.DesktopID, Marker{Kind: kind, Label: label, AgentID: c.AgentID}, time.Now(), nil, nil)
}

// here reports whether this Service records node's desktops (Config.Here).
func (s *Service) here(node string) bool { return s.cfg.Here == nil || s.cfg.Here(node) }

// StartDesktop starts recording desktop d unless it is recorded already or its node does
// not record.
func (s *Service) StartDesktop(d Desktop) {
	if d.ID == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.active[d.ID] != nil || s.settings.off(d.Node) || !s.here(d.Node) {
		return
	}
	now := time.Now()
	info := Info{ID: newID(now), DesktopID: d.ID, Node: d.Node, AccountID: d.AccountID, StartedAt: now.UTC()}
	if d.AgentID != "" {
		info.AgentIDs = []string{d.AgentID}
		s.agentOn[d.AgentID] = d.ID
	}
	info.Markers = []Marker{{At: 0, Kind: MarkDesktop, Label: "desktop running"}}
	_, dir, err := s.cat.create(info)
	if err != nil {
		s.log.Warn("a recording cannot start", "desktop", d.ID, "err", err)
		return
	}
	if err := appendMarker(dir, info.Markers[0]); err != nil {
		s.log.Warn("recording marker", "err", err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	ss := &session{s: s, id: info.ID, desktop: d.ID, dir: dir, began: now, cancel: cancel, done: make(chan struct{})}
	s.active[d.ID] = ss
	s.wg.Add(1)
	go ss.run(ctx)
	s.log.Debug("recording started", "desktop", d.ID, "recording", info.ID)
}

// StopDesktop ends desktop id's recording (why becomes its last marker) and waits for its
// files to be closed.
func (s *Service) StopDesktop(id, why string) {
	s.mu.Lock()
	ss := s.active[id]
	s.mu.Unlock()
	if ss != nil {
		ss.stop(why)
	}
}

// Recording returns the recording being written of desktop id ("" when none).
func (s *Service) Recording(desktopID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.active[desktopID]; ss != nil {
		return ss.id
	}
	return ""
}

// ToolBegan notes that agentID's tool call runID started (its marker comes when it ends).
func (s *Service) ToolBegan(agentID, runID, tool, label string) {
	if runID == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) > 10000 {
		clear(s.pending) // calls that never ended; nothing should hold this many
	}
	s.pending[runID] = toolBegan{agent: agentID, tool: tool, label: label, at: time.Now()}
}

// ToolEnded marks the end of tool call runID on the desktop its agent works on, with the
// screenshot the agent received (mediaType and base64 data; empty when none).
func (s *Service) ToolEnded(runID, status, mediaType, b64 string) {
	s.mu.Lock()
	b, ok := s.pending[runID]
	delete(s.pending, runID)
	desk := s.agentOn[b.agent]
	s.mu.Unlock()
	if !ok || desk == "" {
		return
	}
	label := b.label
	if status != "" && status != "success" {
		label += " (" + status + ")"
	}
	var shot []byte
	if b64 != "" {
		shot, _ = base64.StdEncoding.DecodeString(b64)
	}
	s.mark(desk, Marker{Kind: MarkTool, Label: label, RunID: runID, AgentID: b.agent, Tool: b.tool,
		ShotType: mediaType}, time.Now(), &b.at, shot)
}

// AddMark adds a marker made on the server to the recording being written of its desktop
// (wire.RecordMark: this Service runs on the runner that records the desktop).
func (s *Service) AddMark(rm nodeapi.RecordingMark) {
	now := time.Now()
	at := now.Add(-time.Duration(max(rm.AgoMs, 0)) * time.Millisecond)
	var began *time.Time
	if rm.BeganAgoMs > 0 {
		b := now.Add(-time.Duration(rm.BeganAgoMs) * time.Millisecond)
		began = &b
	}
	m := rm.Marker
	m.At, m.BeganAt, m.Screenshot, m.Shot, m.ShotType = 0, 0, false, "", rm.ShotType
	s.mark(rm.DesktopID, m, at, began, rm.Shot)
}

// mark adds m, made at at, to the recording being written of desktop id; began, when set, is
// when the marked action started; img is a screenshot to keep with it. A desktop recorded
// by another node gets it there (Config.Forward).
func (s *Service) mark(id string, m Marker, at time.Time, began *time.Time, img []byte) {
	s.mu.Lock()
	ss := s.active[id]
	node := s.elsewhere[id]
	s.mu.Unlock()
	if ss == nil {
		if node != "" && s.cfg.Forward != nil {
			s.forwardMark(node, id, m, at, began, img)
		}
		return
	}
	now := at
	m.At = max(now.Sub(ss.began).Milliseconds(), 0)
	if began != nil {
		m.BeganAt = max(began.Sub(ss.began).Milliseconds(), 0)
	}
	if len(img) > 0 {
		ext := ".png"
		if strings.Contains(m.ShotType, "jpeg") {
			ext = ".jpg"
		}
		name := "shot-" + fmt.Sprint(now.UnixNano()) + ext
		if err := os.WriteFile(filepath.Join(ss.dir, name), img, 0o600); err != nil {
			s.log.Warn("keep the agent's screenshot with the recording", "err", err)
		} else {
			m.Shot, m.Screenshot = name, true
			if m.ShotType == "" {
				m.ShotType = "image/png"
			}
		}
	}
	if err := appendMarker(ss.dir, m); err != nil {
		s.log.Warn("recording marker", "recording", ss.id, "err", err)
		return
	}
	s.cat.update(ss.id, func(e *entry) {
		e.info.Markers = append(e.info.Markers, m)
		if m.AgentID != "" && !slices.Contains(e.info.AgentIDs, m.AgentID) {
			e.info.AgentIDs = append(e.info.AgentIDs, m.AgentID)
		}
		if len(img) > 0 {
			e.info.Bytes += int64(len(img))
		}
	})
}

// List returns accountID's recordings listed under agentID (every agent: ""), newest first.
func (s *Service) List(accountID, agentID string) []Info {
	return s.cat.list(func(i Info) bool {
		return i.AccountID == accountID && (agentID == "" || slices.Contains(i.AgentIDs, agentID))
	})
}

// Get returns recording id when it belongs to accountID and is listed under agentID; any
// other is fault.ErrNotFound.
func (s *Service) Get(accountID, agentID, id string) (Info, error) {
	i, ok := s.cat.get(id)
	if !ok || !validID(id) || i.AccountID != accountID || !slices.Contains(i.AgentIDs, agentID) {
		return Info{}, fault.NotFound("recording %q not found", id)
	}
	return i, nil
}

// Delete removes recording id (checked with Get by the caller). A recording being written
// is refused (fault.ErrConflict).
func (s *Service) Delete(id string) error { return s.cat.remove(id) }

// Screenshot returns the file and media type of the screenshot kept with marker i.
func (s *Service) Screenshot(id string, i int) (string, string, error) { return s.cat.shot(id, i) }

// ScreenshotData returns the screenshot kept with marker i and its media type.
func (s *Service) ScreenshotData(id string, i int) ([]byte, string, error) {
	path, typ, err := s.cat.shot(id, i)
	if err != nil {
		return nil, "", err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fault.NotFound("the screenshot of marker %d is gone", i)
	}
	return raw, typ, nil
}

// marshalJSON is json.Marshal for the replay's messages.
func marshalJSON(v any) []byte {
	raw, _ := json.Marshal(v)
	return raw
}

// Lookup returns recording id whatever its account (for administrators).
func (s *Service) Lookup(id string) (Info, error) {
	i, ok := s.cat.get(id)
	if !ok || !validID(id) {
		return Info{}, fault.NotFound("recording %q not found", id)
	}
	return i, nil
}
