package engine

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
)

// LocalDirSize adds up the sizes of the files under dir when it is a directory this process can
// read — a volume's mount point of an engine on this machine — and reports false otherwise (an
// engine in a VM or on another host: ask the engine instead). Adapters use it to measure a few
// volumes without the engine's whole disk-usage report.
func LocalDirSize(ctx context.Context, dir string) (int64, bool) {
	if dir == "" {
		return 0, false
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return 0, false
	}
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		return 0, false
	}
	return n, true
}
