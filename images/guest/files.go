//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"cubicle/images/guest/wire"
)

// resolve makes p absolute: relative paths (and "") resolve against the workspace.
func resolve(workspace, p string) string {
	if p == "" {
		return workspace
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(workspace, p)
}

// fileErr classifies a file system error: missing → not found, permission → forbidden,
// wrong kind of file → invalid.
func fileErr(op, path string, err error) error {
	var errno syscall.Errno
	errors.As(err, &errno)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return wire.NotFound("%s: %s does not exist", op, path)
	case errors.Is(err, fs.ErrPermission):
		return wire.Forbidden("%s: permission denied for %s (the desktop user cannot access it)", op, path)
	case errors.Is(err, fs.ErrExist):
		return wire.Exists("%s: %s already exists", op, path)
	case errno == syscall.ENOTDIR:
		return wire.Invalid("%s: a parent of %s is not a directory", op, path)
	case errno == syscall.EISDIR:
		return wire.Invalid("%s: %s is a directory", op, path)
	case errno == syscall.ENOSPC || errno == syscall.EDQUOT:
		return wire.Unavailable("%s: %s: the disk is full", op, path)
	case errno == syscall.EROFS:
		return wire.Forbidden("%s: %s is on a read-only file system", op, path)
	}
	return fmt.Errorf("%s: %s: %w", op, path, err)
}

type files struct{ workspace string }

func (f files) read(a wire.FileArgs) ([]byte, error) {
	p := resolve(f.workspace, a.Path)
	limit := a.MaxBytes
	if limit <= 0 || limit > wire.MaxFileSize {
		limit = wire.MaxFileSize
	}
	fh, err := os.Open(p)
	if err != nil {
		return nil, fileErr("read", p, err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fileErr("read", p, err)
	}
	if fi.IsDir() {
		return nil, wire.Invalid("read: %s is a directory", p)
	}
	if fi.Size() > limit {
		return nil, wire.Invalid("read: %s is %d bytes, over the limit of %d", p, fi.Size(), limit)
	}
	// Read one byte past the limit: the size may have grown since Stat (or the file is
	// special and reports 0).
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, fileErr("read", p, err)
	}
	if int64(len(data)) > limit {
		return nil, wire.Invalid("read: %s is over the limit of %d bytes", p, limit)
	}
	return data, nil
}

// write replaces the file atomically: a temporary file in the same directory, synced, then
// renamed over the target, so readers see the old or the new content, never a mix.
func (f files) write(a wire.FileArgs, data []byte) error {
	p := resolve(f.workspace, a.Path)
	if len(data) > wire.MaxFileSize {
		return wire.Invalid("write: %d bytes is over the limit of %d", len(data), wire.MaxFileSize)
	}
	mode := a.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return wire.Invalid("write: %s is a directory", p)
	}
	dir := filepath.Dir(p)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".cubicle-*")
	if err != nil {
		return fileErr("write", p, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fileErr("write", p, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fileErr("write", p, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fileErr("write", p, err)
	}
	if err := tmp.Close(); err != nil {
		return fileErr("write", p, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fileErr("write", p, err)
	}
	return nil
}

func info(p string, fi os.FileInfo) wire.FileInfo {
	out := wire.FileInfo{Name: fi.Name(), Path: p, Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime(), IsDir: fi.IsDir()}
	if fi.Mode()&os.ModeSymlink != 0 {
		out.Link, _ = os.Readlink(p)
	}
	return out
}

func (f files) stat(a wire.FileArgs) (wire.FileInfo, error) {
	p := resolve(f.workspace, a.Path)
	fi, err := os.Lstat(p)
	if err != nil {
		return wire.FileInfo{}, fileErr("stat", p, err)
	}
	return info(p, fi), nil
}

// maxList caps one directory listing.
const maxList = 10000

func (f files) list(a wire.FileArgs) ([]wire.FileInfo, error) {
	p := resolve(f.workspace, a.Path)
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, fileErr("list", p, err)
	}
	if len(entries) > maxList {
		return nil, wire.Invalid("list: %s has %d entries, over the limit of %d", p, len(entries), maxList)
	}
	out := make([]wire.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, info(filepath.Join(p, e.Name()), fi))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f files) mkdir(a wire.FileArgs) error {
	p := resolve(f.workspace, a.Path)
	var err error
	if a.Parents {
		err = os.MkdirAll(p, 0o755)
	} else {
		err = os.Mkdir(p, 0o755)
	}
	if err != nil {
		return fileErr("mkdir", p, err)
	}
	return nil
}
