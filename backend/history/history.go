// Package history records every tool call an agent makes (SPEC §2.5): session, turn, step,
// tool, SHA-256 of the input and of the output (null on failure), status (INTERRUPTED when a
// person stopped it or the process ended under it, see store.InterruptRuns), duration, and the
// process's CPU time and peak memory where measurable; and answers one query per session
// with its timeline, durations and failure rate.
package history

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/store"
)

// Store is the part of the store the history needs.
type Store interface {
	PutToolRun(r store.ToolRun) error
	ToolRuns(userID, sessionID string) ([]store.ToolRun, error)
}

// Recorder implements agent.Recorder on the store. Writes that fail are logged, never fatal
// to the turn.
type Recorder struct {
	st  Store
	log *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	open map[string]openRun // guarded by mu
}

type openRun struct {
	run store.ToolRun
	cpu time.Duration
}

// New returns a Recorder.
func New(st Store, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{st: st, log: log, now: time.Now, open: map[string]openRun{}}
}

func digest(v any) string {
	raw, _ := json.Marshal(v)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// Begin implements agent.Recorder.
func (r *Recorder) Begin(t agent.TurnInfo, call agent.ToolCall) string {
	now := r.now().UTC()
	run := store.ToolRun{ID: agent.NewID(), SessionID: t.SessionID, UserID: t.UserID, TurnID: t.TurnID, Step: t.Step,
		Tool: call.Name, Source: t.Source(), InputSHA256: digest(call.Input), Status: store.RunRunning, CreatedAt: now, UpdatedAt: now}
	if err := r.st.PutToolRun(run); err != nil {
		r.log.Warn("record tool run", "tool", call.Name, "err", err)
	}
	r.mu.Lock()
	r.open[run.ID] = openRun{run: run, cpu: cpuTime()}
	r.mu.Unlock()
	return run.ID
}

// End implements agent.Recorder.
func (r *Recorder) End(id, state string, output []agent.ContentBlock, elapsed time.Duration) {
	r.mu.Lock()
	o, ok := r.open[id]
	delete(r.open, id)
	r.mu.Unlock()
	if !ok {
		return
	}
	run := o.run
	run.UpdatedAt = r.now().UTC()
	run.DurationMs = elapsed.Milliseconds()
	run.CPUMillis = (cpuTime() - o.cpu).Milliseconds()
	run.MemoryBytes = maxRSS()
	switch state {
	case agent.StateSuccess:
		run.Status = store.RunSuccess
		d := digest(output)
		run.OutputSHA256 = &d
	case agent.StateInterrupted:
		run.Status = store.RunInterrupted
	default:
		run.Status = store.RunFailed
	}
	if err := r.st.PutToolRun(run); err != nil {
		r.log.Warn("record tool run", "tool", run.Tool, "err", err)
	}
}

// Timeline is a session's history with its totals.
type Timeline struct {
	SessionID   string          `json:"sessionId"`
	Runs        []store.ToolRun `json:"runs"`
	Total       int             `json:"total"`
	Failed      int             `json:"failed"`
	FailureRate float64         `json:"failureRate"` // failed (FAILED, TIMEOUT or INTERRUPTED) / finished
	DurationMs  int64           `json:"durationMs"`  // sum of the runs' durations
	ByTool      []ToolStats     `json:"byTool"`
}

// ToolStats sums one tool's runs.
type ToolStats struct {
	Tool       string `json:"tool"`
	Count      int    `json:"count"`
	Failed     int    `json:"failed"`
	DurationMs int64  `json:"durationMs"`
	MaxMs      int64  `json:"maxMs"`
}

// Runs reads the runs of one account's session (the store implements it).
type Runs interface {
	ToolRuns(userID, sessionID string) ([]store.ToolRun, error)
}

// Query returns the timeline of userID's session sessionID: only that account's runs, even
// when another account used the same session id.
func Query(st Runs, userID, sessionID string) (Timeline, error) {
	runs, err := st.ToolRuns(userID, sessionID)
	if err != nil {
		return Timeline{}, err
	}
	tl := Timeline{SessionID: sessionID, Runs: runs}
	if tl.Runs == nil {
		tl.Runs = []store.ToolRun{}
	}
	by := map[string]*ToolStats{}
	finished := 0
	for _, r := range runs {
		tl.Total++
		tl.DurationMs += r.DurationMs
		s := by[r.Tool]
		if s == nil {
			s = &ToolStats{Tool: r.Tool}
			by[r.Tool] = s
		}
		s.Count++
		s.DurationMs += r.DurationMs
		s.MaxMs = max(s.MaxMs, r.DurationMs)
		switch r.Status {
		case store.RunFailed, store.RunTimeout, store.RunInterrupted:
			tl.Failed++
			s.Failed++
			finished++
		case store.RunSuccess:
			finished++
		}
	}
	if finished > 0 {
		tl.FailureRate = float64(tl.Failed) / float64(finished)
	}
	for _, s := range by {
		tl.ByTool = append(tl.ByTool, *s)
	}
	sort.Slice(tl.ByTool, func(i, j int) bool { return tl.ByTool[i].Tool < tl.ByTool[j].Tool })
	return tl, nil
}
