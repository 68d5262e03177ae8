package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Entry types.
const (
	TypeFile    = "f"
	TypeDir     = "d"
	TypeSymlink = "l"
)

// Entry is one path of a tree. The root is the entry with Path "".
type Entry struct {
	Path string `json:"p"` // slash-separated, relative to the root
	Type string `json:"t"`
	Mode uint32 `json:"m"` // permission bits and setuid/setgid/sticky (fs.FileMode bits)
	UID  int    `json:"u"`
	GID  int    `json:"g"`
	Size int64  `json:"s,omitempty"`
	// MTime is the modification time (Unix nanoseconds); restores set it back.
	MTime  int64    `json:"mt,omitempty"`
	SHA256 string   `json:"h,omitempty"` // a file's content
	Chunks []string `json:"c,omitempty"` // a file's chunks, in order
	Target string   `json:"l,omitempty"` // a symlink's target
	// sig: change time and inode, seen when the snapshot was taken; with Size and MTime it
	// tells the next snapshot that a file did not change. Not part of the tree hash.
	CTime int64  `json:"ct,omitempty"`
	Ino   uint64 `json:"i,omitempty"`
}

// Manifest is a snapshot's tree: its entries sorted by path, the root first.
type Manifest struct {
	TreeSHA256 string  `json:"treeSha256"`
	Entries    []Entry `json:"entries"`
}

// TreeHash computes the tree's SHA-256 from its entries: one line per entry, in path order,
// with type, mode, owner, size, content hash or link target, and path.
func (m *Manifest) TreeHash() string { return treeHash(m.Entries) }

func treeHash(entries []Entry) string {
	h := sha256.New()
	var line []byte
	for _, e := range entries {
		line = line[:0]
		line = append(line, e.Type...)
		line = append(line, ' ')
		line = strconv.AppendUint(line, uint64(e.Mode), 8)
		line = append(line, ' ')
		line = strconv.AppendInt(line, int64(e.UID), 10)
		line = append(line, ':')
		line = strconv.AppendInt(line, int64(e.GID), 10)
		line = append(line, ' ')
		line = strconv.AppendInt(line, e.Size, 10)
		line = append(line, ' ')
		switch e.Type {
		case TypeFile:
			line = append(line, e.SHA256...)
		case TypeSymlink:
			line = strconv.AppendQuote(line, e.Target)
		default:
			line = append(line, '-')
		}
		line = append(line, ' ')
		line = strconv.AppendQuote(line, e.Path)
		line = append(line, '\n')
		h.Write(line)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// modeBits keeps the permission and special bits of a file mode.
func modeBits(m fs.FileMode) uint32 {
	return uint32(m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
}

// scan lists the tree under root (without reading file contents): entries in path order, the
// root first, and how many were skipped (sockets, devices, FIFOs).
func scan(ctx context.Context, root string, idBase int) ([]Entry, int, error) {
	st, err := os.Lstat(root)
	if err != nil {
		return nil, 0, fmt.Errorf("scan %s: %w", root, err)
	}
	if !st.IsDir() {
		return nil, 0, fmt.Errorf("scan %s: not a directory", root)
	}
	var out []Entry
	skipped := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := Entry{Path: filepath.ToSlash(rel), Mode: modeBits(info.Mode())}
		e.UID, e.GID, e.CTime, e.Ino = owner(info)
		e.UID, e.GID = fromHost(e.UID, idBase), fromHost(e.GID, idBase)
		switch {
		case info.Mode().IsRegular():
			e.Type, e.Size, e.MTime = TypeFile, info.Size(), info.ModTime().UnixNano()
		case info.IsDir():
			e.Type = TypeDir
			e.MTime = info.ModTime().UnixNano()
			e.CTime, e.Ino = 0, 0
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.Type, e.Target, e.Size = TypeSymlink, t, 0
			e.CTime, e.Ino = 0, 0
		default:
			skipped++
			return nil
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("scan %s: %w", root, err)
	}
	sortEntries(out)
	return out, skipped, nil
}

// idRange is the size of a desktop's user namespace (vm's userNSSize).
const idRange = 65536

// fromHost makes a host id relative to a user namespace based at base (ids outside it stay).
func fromHost(id, base int) int {
	if base > 0 && id >= base && id < base+idRange {
		return id - base
	}
	return id
}

// toHost is fromHost's inverse for ids inside the namespace.
func toHost(id, base int) int {
	if base > 0 && id >= 0 && id < idRange {
		return id + base
	}
	return id
}

// sortEntries orders entries by path (the root, "", first). WalkDir's lexical order already
// is, except that it compares names within a directory; a plain string order is canonical.
func sortEntries(es []Entry) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Path < es[j].Path })
}

// TreeSHA256 hashes the tree under dir as a snapshot of it would (reading every file; owners
// relative to idBase, see Options.IDBase): tests and tools compare a restored tree with the
// snapshot's TreeSHA256.
func TreeSHA256(ctx context.Context, dir string, idBase int) (string, error) {
	es, _, err := scan(ctx, dir, idBase)
	if err != nil {
		return "", err
	}
	for i := range es {
		if es[i].Type != TypeFile {
			continue
		}
		sum, err := fileSHA256(filepath.Join(dir, filepath.FromSlash(es[i].Path)))
		if err != nil {
			return "", err
		}
		es[i].SHA256 = sum
	}
	return treeHash(es), nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
