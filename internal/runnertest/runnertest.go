// Package runnertest starts in-process runners for tests, the way `cubicle runner` runs one:
// a runner.Runner whose Run is owned by the test (its cleanup cancels Run, waits for it to
// end and closes the runner). It imports runner only, so the backend's own tests can use it.
package runnertest

import (
	"context"
	"sync"
	"testing"

	"cubicle/runner"
)

// Runner is a runner running for a test.
type Runner struct {
	*runner.Runner
	t      testing.TB
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start makes a runner from cfg and runs it until Stop or the end of the test.
func Start(t testing.TB, cfg runner.Config) *Runner {
	t.Helper()
	r, err := runner.New(cfg)
	if err != nil {
		t.Fatalf("runner: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &Runner{Runner: r, t: t, cancel: cancel, done: make(chan struct{})}
	go func() { // owned by tr: ends with Stop
		defer close(tr.done)
		r.Run(ctx)
	}()
	t.Cleanup(tr.Stop)
	return tr
}

// Stop ends the runner's Run, waits for it and closes the runner (once; a close error fails
// the test).
func (r *Runner) Stop() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
		if err := r.Runner.Close(); err != nil {
			r.t.Errorf("close the runner: %v", err)
		}
	})
}
