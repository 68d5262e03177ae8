package knowledge

import (
	"fmt"
	"testing"
	"time"

	"cubicle/backend/agent"
)

// words make synthetic requests that differ from run to run.
var words = []string{"install", "compress", "photos", "nginx", "invoice", "rename", "browser", "flight", "report", "backup",
	"database", "python", "script", "archive", "download", "upload", "spreadsheet", "chart", "email", "calendar"}

// fill records n runs of account acme.
func fill(b testing.TB, f *fixture, n int) {
	for i := range n {
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
		req := fmt.Sprintf("%s the %s %s for project %d", words[i%len(words)], words[(i/3)%len(words)], words[(i/7)%len(words)], i)
		f.svc.Record(agent.Outcome{Info: agent.TurnInfo{UserID: "acme", SessionID: "s"}, RequestID: fmt.Sprint(i), RequestAt: at, Request: req,
			Tools: []agent.ToolStep{{Name: "computer_shell", State: agent.StateSuccess}}, Result: "done: " + req, EndedAt: at})
	}
}

// benchRuns is how many runs the benchmarks' account has.
const benchRuns = 1000

// BenchmarkSearchKeyword is one "ask past runs" over an account with benchRuns runs.
func BenchmarkSearchKeyword(b *testing.B) {
	f := newFixture(b)
	fill(b, f, benchRuns)
	if _, err := f.svc.Search(b.Context(), "acme", "compress the photos", 5); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if res, err := f.svc.Search(b.Context(), "acme", "compress the nginx photos archive", 5); err != nil || len(res.Hits) != 5 {
			b.Fatalf("%+v %v", res.Hits, err)
		}
	}
}

// BenchmarkRebuild is the first search after a start: the account's index built from the
// store (benchRuns runs).
func BenchmarkRebuild(b *testing.B) {
	f := newFixture(b)
	fill(b, f, benchRuns)
	b.ResetTimer()
	for b.Loop() {
		f.svc.Clear("nobody") // no-op on the store
		f.svc.mu.Lock()
		for _, ai := range f.svc.indexes {
			ai.close()
		}
		f.svc.indexes = map[string]*accountIndex{}
		f.svc.mu.Unlock()
		if _, err := f.svc.Search(b.Context(), "acme", "compress the photos", 5); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecord is indexing one finished turn (store write + in-memory index).
func BenchmarkRecord(b *testing.B) {
	f := newFixture(b)
	fill(b, f, 100)
	f.svc.Search(b.Context(), "acme", "x", 1) // the index is loaded
	i := 100
	for b.Loop() {
		i++
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
		f.svc.Record(agent.Outcome{Info: agent.TurnInfo{UserID: "acme", SessionID: "s"}, RequestID: fmt.Sprint(i), RequestAt: at,
			Request: "compress the photos " + fmt.Sprint(i), Result: "ok", EndedAt: at})
	}
}
