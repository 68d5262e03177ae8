//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cubicle/images/guest/wire"
)

// waitDir waits (inotify, nothing polled) until something in the folder a.Path changes — an
// entry created, removed or renamed, a file written and closed, its attributes — or its
// timeout or ctx ends. The web client's Downloads list follows ~/Downloads with it.
func (f files) waitDir(ctx context.Context, a wire.WaitDirArgs) (wire.DirChange, error) {
	p := a.Path
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return wire.DirChange{}, wire.Invalid("wait_dir: no home folder for ~/: %v", err)
		}
		p = filepath.Join(home, rest)
	}
	p = resolve(f.workspace, p)
	limit := a.Timeout
	if limit <= 0 || limit > wire.MaxDirWait {
		limit = wire.MaxDirWait
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return wire.DirChange{}, wire.Unavailable("wait_dir: inotify: %v", err)
	}
	defer unix.Close(fd)
	const mask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE |
		unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	if _, err := unix.InotifyAddWatch(fd, p, mask); err != nil {
		return wire.DirChange{}, fileErr("wait_dir", p, err)
	}
	deadline := time.Now().Add(limit)
	for {
		if err := ctx.Err(); err != nil {
			return wire.DirChange{}, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return wire.DirChange{}, nil
		}
		// Short polls of the descriptor so that a cancelled request ends within 200 ms.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(left, 200*time.Millisecond)/time.Millisecond)+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return wire.DirChange{}, wire.Unavailable("wait_dir: poll: %v", err)
		}
		if n > 0 {
			return wire.DirChange{Changed: true}, nil
		}
	}
}
