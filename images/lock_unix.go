//go:build unix

package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"cubicle/backend/fault"
)

// lockHost takes the host-wide build lock at path (flock), waiting while another process holds
// it. Two processes preparing the same image (the app and a CLI run, or tests in parallel)
// would otherwise both build it and race for its tag. waiting is called once if the lock is
// busy. The lock is released by unlock, or by the kernel when the process ends.
func lockHost(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fault.Unavailable("open the image build lock %s: %v", path, err)
	}
	fd := int(f.Fd())
	for told := false; ; {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(fd, syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fault.Unavailable("take the image build lock %s: %v", path, err)
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("wait for another image build: %w", ctx.Err())
		case <-t.C:
		}
	}
}
