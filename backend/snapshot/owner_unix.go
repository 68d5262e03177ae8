//go:build unix

package snapshot

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// owner returns a file's owner, group, change time (Unix ns) and inode.
func owner(info fs.FileInfo) (uid, gid int, ctime int64, ino uint64) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0, 0
	}
	return int(st.Uid), int(st.Gid), changeTime(st), uint64(st.Ino)
}

// chown sets a path's owner without following a symlink. Only root can give files away: for
// anyone else a refusal is not an error (the files keep the restoring user's ids).
func chown(path string, uid, gid int) error {
	err := os.Lchown(path, uid, gid)
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		return nil
	}
	return err
}
