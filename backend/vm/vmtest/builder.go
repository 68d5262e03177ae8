package vmtest

import (
	"context"
	"sync"

	"cubicle/images"
)

// Builder is an image builder (vm.ImageBuilder) that "builds" instantly, or blocks until its
// gate is closed, or fails with a set error.
type Builder struct {
	mu    sync.Mutex
	calls int
	gate  chan struct{} // nil: no wait
	err   error
}

// SetGate makes later Ensure calls wait until gate is closed (nil: no wait).
func (b *Builder) SetGate(gate chan struct{}) { b.mu.Lock(); b.gate = gate; b.mu.Unlock() }

// SetErr makes later Ensure calls fail with err (nil: succeed).
func (b *Builder) SetErr(err error) { b.mu.Lock(); b.err = err; b.mu.Unlock() }

// Calls returns how many times Ensure was called.
func (b *Builder) Calls() int { b.mu.Lock(); defer b.mu.Unlock(); return b.calls }

// Ensure reports progress and returns localhost/cubicle-desktop:<key>-abc.
func (b *Builder) Ensure(ctx context.Context, key images.Key, progress func(images.Progress)) (images.Result, error) {
	b.mu.Lock()
	b.calls++
	gate, err := b.gate, b.err
	b.mu.Unlock()
	progress(images.Progress{Step: "build 1/2", Line: "RUN apt-get install", Percent: 50})
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return images.Result{}, ctx.Err()
		}
	}
	if err != nil {
		return images.Result{}, err
	}
	progress(images.Progress{Step: "done", Percent: 100})
	return images.Result{Key: key, Ref: "localhost/cubicle-desktop:" + string(key) + "-abc", ImageID: "sha256:img-" + string(key),
		RecipeHash: "abc123", Reused: false}, nil
}
