// Package history records every tool call an agent makes (SPEC §2.5): session, turn, step,
// tool, SHA-256 of the input and of the output (null on failure), status — PENDING while the
// call is queued (behind a person's confirmation, its desktop starting, the desktop's lease),
// RUNNING, then SUCCESS, FAILED, TIMEOUT (its deadline ended it) or INTERRUPTED (a person
// stopped it or the process ended under it, see store.InterruptRuns) — its duration, and the
// CPU time and peak memory of the command it ran, measured where it ran (the driver's wait4 of
// the child in the desktop, ProcessUsage on the host); tools that run no command leave them
// out. It answers one query per session with its timeline, durations and failure rate, and
// exports a session as JSON Lines.
package history

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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
	open map[string]store.ToolRun // guarded by mu
}

// New returns a Recorder.
func New(st Store, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{st: st, log: log, now: time.Now, open: map[string]store.ToolRun{}}
}

func digest(v any) string {
	raw, _ := json.Marshal(v)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

func (r *Recorder) put(run store.ToolRun) {
	if err := r.st.PutToolRun(run); err != nil {
		r.log.Warn("record tool run", "tool", run.Tool, "err", err)
	}
}

// Begin implements agent.Recorder: the call is PENDING until Running.
func (r *Recorder) Begin(t agent.TurnInfo, call agent.ToolCall) string {
	now := r.now().UTC()
	run := store.ToolRun{ID: agent.NewID(), SessionID: t.SessionID, UserID: t.UserID, TurnID: t.TurnID, Step: t.Step,
		Tool: call.Name, Source: t.Source(), InputSHA256: digest(call.Input), Status: store.RunPending, CreatedAt: now, UpdatedAt: now}
	r.put(run)
	r.mu.Lock()
	r.open[run.ID] = run
	r.mu.Unlock()
	return run.ID
}

// Running implements agent.Recorder.
func (r *Recorder) Running(id string) {
	r.mu.Lock()
	run, ok := r.open[id]
	if ok && run.Status == store.RunPending {
		run.Status = store.RunRunning
		run.StartedAt = r.now().UTC()
		run.UpdatedAt = run.StartedAt
		r.open[id] = run
	}
	r.mu.Unlock()
	if ok {
		r.put(run)
	}
}

// End implements agent.Recorder.
func (r *Recorder) End(id string, end agent.RunEnd) {
	r.mu.Lock()
	run, ok := r.open[id]
	delete(r.open, id)
	r.mu.Unlock()
	if !ok {
		return
	}
	run.UpdatedAt = r.now().UTC()
	run.DurationMs = end.Elapsed.Milliseconds()
	run.CPUMillis = end.Usage.CPU.Milliseconds()
	run.MemoryBytes = end.Usage.MemoryBytes
	switch {
	case end.TimedOut:
		run.Status = store.RunTimeout
	case end.State == agent.StateSuccess:
		run.Status = store.RunSuccess
		d := digest(end.Output)
		run.OutputSHA256 = &d
	case end.State == agent.StateInterrupted:
		run.Status = store.RunInterrupted
	default:
		run.Status = store.RunFailed
	}
	if end.State == agent.StateDenied {
		run.Denied = true
	}
	r.put(run)
}

// Export writes userID's session sessionID as JSON Lines: one store.ToolRun per line, in the
// order the runs began. It writes nothing for a session without runs.
func Export(st Runs, userID, sessionID string, w io.Writer) error {
	runs, err := st.ToolRuns(userID, sessionID)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w) // one value and a newline per Encode
	for _, run := range runs {
		if err := enc.Encode(run); err != nil {
			return fmt.Errorf("history: export: %w", err)
		}
	}
	return nil
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
