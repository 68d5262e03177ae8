// Package doctor checks what Cubicle needs on this machine — a container engine, a display,
// a writable data directory — and says how to fix what is missing. `cubicle doctor` prints the
// report as a table; the Local VM settings page shows the same report.
package doctor

import (
	"context"
	"sync"

	"cubicle/backend/engine"
)

// Status of one check.
type Status string

// Check statuses.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is the outcome of one check.
type Check struct {
	Name     string `json:"name"`
	Status   Status `json:"status"`
	Detail   string `json:"detail"`
	Fix      string `json:"fix,omitempty"`
	Required bool   `json:"required"` // a failed required check makes the report fail
	// Engines are the endpoints the engine check probed; Run lists them in Report.Engines.
	Engines []engine.Endpoint `json:"-"`
}

// Report is the outcome of all checks, in a stable order, and every container engine
// endpoint discovery probed, in order of preference.
type Report struct {
	Engines []engine.Endpoint `json:"engines"`
	Checks  []Check           `json:"checks"`
}

// OK reports whether every required check passed.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if c.Required && c.Status == Fail {
			return false
		}
	}
	return true
}

// Checker runs one or more checks.
type Checker func(ctx context.Context) []Check

// Run runs the checkers concurrently and returns their checks in the checkers' order.
func Run(ctx context.Context, checkers ...Checker) Report {
	out := make([][]Check, len(checkers))
	var wg sync.WaitGroup
	for i, c := range checkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c(ctx)
		}()
	}
	wg.Wait()
	r := Report{Engines: []engine.Endpoint{}, Checks: []Check{}}
	for _, cs := range out {
		for _, c := range cs {
			r.Engines = append(r.Engines, c.Engines...)
		}
		r.Checks = append(r.Checks, cs...)
	}
	return r
}
