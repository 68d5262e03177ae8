package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"runtime/debug"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"cubicle/backend/fault"
)

// Checking a data file before bbolt opens it. bbolt trusts its file: a truncated file makes
// it read past the end of its memory map (a fault that kills the process), a damaged page a
// panic. So Open first reads the two meta pages, the freelist and the root page itself
// (checkHeader, a few KiB of reads), then opens the file with faults and panics turned into
// errors. For a file up to defaultWalkLimit it first walks every page with plain reads,
// bounded by the file (walkPages, pages.go), then reads every record (walk) and runs bbolt's
// own consistency check (inspect). The full check of `cubicle doctor --check-store` (Check)
// runs the same checks on a file of any size and also decodes every JSON record.

// bbolt's on-disk constants (go.etcd.io/bbolt/internal/common, file format version 2).
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16
	metaChecksumOff  = 56 // the checksum covers the meta's bytes before it
	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	metaPageFlag     = 0x04
	freelistPageFlag = 0x10
	noFreelist       = ^uint64(0)
)

// maxTxid is the highest transaction id a sound file can have: a million commits a second
// for eight years.
const maxTxid = 1 << 48

// defaultWalkLimit is the largest file Open walks page by page (a few milliseconds per MiB).
const defaultWalkLimit = 64 << 20

// boltMeta is the part of a bbolt meta page the checks read.
type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64 // high water mark: pages [0, pgid) are in use
	txid     uint64
}

// readMeta decodes and validates the meta page that starts at off; ok is false when it is not
// a valid meta page (wrong magic or version, bad checksum, or too short).
func readMeta(f *os.File, off int64) (boltMeta, bool) {
	var buf [pageHeaderSize + 64]byte
	if _, err := f.ReadAt(buf[:], off); err != nil {
		return boltMeta{}, false
	}
	m := buf[pageHeaderSize:]
	ne := binary.NativeEndian
	if ne.Uint32(m[0:]) != boltMagic || ne.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(m[:metaChecksumOff])
	if h.Sum64() != ne.Uint64(m[metaChecksumOff:]) {
		return boltMeta{}, false
	}
	return boltMeta{pageSize: ne.Uint32(m[8:]), root: ne.Uint64(m[16:]), freelist: ne.Uint64(m[32:]),
		pgid: ne.Uint64(m[40:]), txid: ne.Uint64(m[48:])}, true
}

// goodPageSize reports whether bbolt can use pages of ps bytes.
func goodPageSize(ps uint32) bool {
	return ps >= 512 && ps <= 1<<20 && ps&(ps-1) == 0
}

// checkHeader runs the cheap checks on an existing, non-directory file of size bytes: a
// valid meta page (the one bbolt would use), pages that fit in the file, a freelist whose
// page ids are in range and a root page of the right type. It returns what is wrong, or "".
func checkHeader(f *os.File, size int64) string {
	problem, _, _ := readHeader(f, size)
	return problem
}

// readHeader is checkHeader that also returns the meta in force and the freelist's page ids.
func readHeader(f *os.File, size int64) (string, boltMeta, []uint64) {
	var m boltMeta
	bad := func(p string) (string, boltMeta, []uint64) { return p, m, nil }
	if size == 0 {
		return bad("the file is empty (0 bytes)")
	}
	m0, ok0 := readMeta(f, 0)
	var m1 boltMeta
	ok1 := false
	if ok0 {
		// bbolt takes the page size of every page from a valid meta page 0.
		if !goodPageSize(m0.pageSize) {
			return bad(fmt.Sprintf("its meta page 0 says its pages have %d bytes", m0.pageSize))
		}
		m1, ok1 = readMeta(f, int64(m0.pageSize))
		if ok1 && m1.pageSize != m0.pageSize {
			return bad(fmt.Sprintf("its meta pages disagree on the page size (%d and %d bytes)", m0.pageSize, m1.pageSize))
		}
	} else {
		// Meta page 0 is damaged: look for meta page 1 at every page size bbolt may use.
		for ps := int64(1024); ps <= 64<<10 && !ok1; ps *= 2 {
			if m, ok := readMeta(f, ps); ok && int64(m.pageSize) == ps {
				m1, ok1 = m, true
			}
		}
	}
	switch {
	case ok0 && ok1:
		m = m0
		if m1.txid > m0.txid {
			m = m1
		}
	case ok0:
		m = m0
	case ok1:
		m = m1
	default:
		return bad("it has no valid header (neither bbolt meta page is intact): it is damaged, or not a Cubicle data file")
	}
	ps := int64(m.pageSize)
	if m.txid > maxTxid {
		// bbolt counts transactions up from here: near the top it wraps around and loops.
		return bad(fmt.Sprintf("its header claims transaction %d, more than any file has made", m.txid))
	}
	// bbolt's consistency check asserts (a panic no recover reaches: it runs in a goroutine
	// of its own) that both meta pages say who they are, whichever one is in force.
	for i := range int64(2) {
		if flags, id, _, _, err := pageHeader(f, i*ps); err != nil || id != uint64(i) || flags != metaPageFlag {
			return bad(fmt.Sprintf("its meta page %d is damaged (type %#x, id %d)", i, flags, id))
		}
	}
	if m.pgid < 3 {
		return bad(fmt.Sprintf("its header claims only %d pages", m.pgid))
	}
	if m.pgid > uint64(size/ps) {
		return bad(fmt.Sprintf("it is truncated: it has %d bytes but its header claims %d pages of %d bytes", size, m.pgid, ps))
	}
	if m.root < 2 || m.root >= m.pgid {
		return bad(fmt.Sprintf("its root page %d is outside the file's %d pages", m.root, m.pgid))
	}
	if flags, id, _, _, err := pageHeader(f, int64(m.root)*ps); err != nil || id != m.root ||
		(flags != branchPageFlag && flags != leafPageFlag) {
		return bad(fmt.Sprintf("its root page %d is damaged (type %#x, id %d)", m.root, flags, id))
	}
	if m.freelist == noFreelist {
		return "", m, nil
	}
	if m.freelist < 2 || m.freelist >= m.pgid {
		return bad(fmt.Sprintf("its freelist page %d is outside the file's %d pages", m.freelist, m.pgid))
	}
	off := int64(m.freelist) * ps
	flags, id, count, overflow, err := pageHeader(f, off)
	if err != nil || id != m.freelist || flags != freelistPageFlag {
		return bad(fmt.Sprintf("its freelist page %d is damaged (type %#x, id %d)", m.freelist, flags, id))
	}
	if m.freelist+uint64(overflow) >= m.pgid {
		return bad(fmt.Sprintf("its freelist overruns the file's %d pages", m.pgid))
	}
	n, start := uint64(count), off+pageHeaderSize
	if count == 0xFFFF { // the real count is the first element
		var b [8]byte
		if _, err := f.ReadAt(b[:], start); err != nil {
			return bad("its freelist cannot be read: " + err.Error())
		}
		n, start = binary.NativeEndian.Uint64(b[:]), start+8
	}
	if end := start + int64(n)*8; n > m.pgid || end > off+int64(uint64(overflow)+1)*ps {
		return bad(fmt.Sprintf("its freelist claims %d free pages, more than it can hold", n))
	}
	ids := make([]byte, n*8)
	free := make([]uint64, n)
	if _, err := f.ReadAt(ids, start); err != nil {
		return bad("its freelist cannot be read: " + err.Error())
	}
	for i := uint64(0); i < n; i++ {
		p := binary.NativeEndian.Uint64(ids[i*8:])
		if p < 2 || p >= m.pgid {
			return bad(fmt.Sprintf("its freelist names page %d, outside the file's %d pages", p, m.pgid))
		}
		free[i] = p
	}
	return "", m, free
}

// pageHeader reads the header of the page at off.
func pageHeader(f *os.File, off int64) (flags uint16, id uint64, count uint16, overflow uint32, err error) {
	var b [pageHeaderSize]byte
	if _, err = f.ReadAt(b[:], off); err != nil {
		return 0, 0, 0, 0, err
	}
	ne := binary.NativeEndian
	return ne.Uint16(b[8:]), ne.Uint64(b[0:]), ne.Uint16(b[10:]), ne.Uint32(b[12:]), nil
}

// checkFile runs checkHeader on path and, when the file has at most walkUpTo bytes, the page
// walk (walkPages). A missing file is os.ErrNotExist; a walk that ctx ended is ctx's error.
func checkFile(ctx context.Context, path string, walkUpTo int64) (problem string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return "", fmt.Errorf("%s is a directory", path)
	}
	problem, m, free := readHeader(f, fi.Size())
	if problem != "" || fi.Size() > walkUpTo {
		return problem, nil
	}
	problem = walkPages(ctx, f, m, free)
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if problem != "" {
		problem = "a page of it cannot be read (" + problem + ")"
	}
	return problem, nil
}

// inspect reads every record of db (walk) and runs bbolt's consistency check of every page;
// it returns what is wrong. Run it only on a file whose pages checkFile walked: bbolt's check
// trusts every page header it meets.
func inspect(db *bbolt.DB) []string {
	var problems []string
	err := safely(func() error {
		return db.View(func(tx *bbolt.Tx) error {
			if err := walk(tx); err != nil {
				return err
			}
			// bbolt's check runs in a goroutine of its own; the walks above have read every
			// page it will visit, so it meets no page that could crash it.
			for err := range tx.Check() {
				problems = append(problems, err.Error())
			}
			return nil
		})
	})
	if err != nil {
		problems = append(problems, "a page of it cannot be read ("+err.Error()+")")
	}
	return problems
}

// safely runs fn with memory faults (a read past the end of bbolt's map) and panics turned
// into an error; bbolt's own deferred rollbacks release its locks on the way out.
func safely(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: debug.Stack()}
		}
	}()
	return fn()
}

// panicError is a panic (or memory fault) inside bbolt, turned into an error.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("the store crashed reading the file: %v", e.value)
}

// walk reads every key and value of every bucket in tx, so that every page the tree reaches
// is loaded; a damaged page shows up as an error (from safely) instead of a later crash.
func walk(tx *bbolt.Tx) error {
	var sum byte
	var walkBucket func(b *bbolt.Bucket, depth int) error
	walkBucket = func(b *bbolt.Bucket, depth int) error {
		if depth > 64 {
			return errors.New("buckets nested more than 64 deep")
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			for _, x := range k {
				sum ^= x
			}
			if v == nil {
				if nb := b.Bucket(k); nb != nil {
					if err := walkBucket(nb, depth+1); err != nil {
						return err
					}
				}
				continue
			}
			for _, x := range v {
				sum ^= x
			}
		}
		return nil
	}
	err := tx.ForEach(func(name []byte, b *bbolt.Bucket) error { return walkBucket(b, 0) })
	_ = sum
	return err
}

// jsonBuckets hold JSON records (every value is checked by Check).
var jsonBuckets = map[string]bool{"accounts": true, "agents": true, "node_settings": true, "vm_images": true,
	"vm_instances": true, "vm_bindings": true, "chat_sessions": true, "tool_runs": true, "app_settings": true, "runners": true}

// CheckReport is what Check found.
type CheckReport struct {
	Path     string
	Size     int64
	Buckets  int
	Records  int
	Problems []string // empty when the file is sound
}

// OK reports whether the file is sound.
func (r CheckReport) OK() bool { return len(r.Problems) == 0 }

// Check runs the full check of the data file at path (`cubicle doctor --check-store`): the
// header checks, the page walk (walkPages), bbolt's consistency check of every page, a read
// of every record, and a JSON decode of every record of the buckets that hold JSON. It opens
// the file read-only and never changes it. A file another process holds open is
// fault.ErrUnavailable (stop Cubicle first); a missing file is fault.ErrNotFound. Damage is
// reported in the report, not as an error. Open refuses a file (up to its walk limit) exactly
// when Check finds damage other than records that are not valid JSON.
func Check(path string, lockTimeout time.Duration) (CheckReport, error) {
	return CheckContext(context.Background(), path, lockTimeout)
}

// CheckContext is Check that stops when ctx ends (with ctx's error).
func CheckContext(ctx context.Context, path string, lockTimeout time.Duration) (CheckReport, error) {
	r := CheckReport{Path: path}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, fault.NotFound("no data file at %s", path)
	} else if err != nil {
		return r, fault.Unavailable("check %s: %v", path, err)
	}
	r.Size = fi.Size()
	problem, err := checkFile(ctx, path, math.MaxInt64)
	if ctx.Err() != nil {
		return r, fmt.Errorf("the check of %s was stopped: %w", path, ctx.Err())
	}
	if err != nil {
		return r, fault.Unavailable("check %s: %v", path, err)
	}
	if problem != "" {
		r.Problems = append(r.Problems, problem)
		return r, nil
	}
	if lockTimeout <= 0 {
		lockTimeout = defaultLockTimeout
	}
	var db *bbolt.DB
	err = safely(func() error {
		var err error
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: lockTimeout})
		return err
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return r, fault.Unavailable("the data file %s is in use by a running Cubicle: stop it, then check again", path)
	}
	if err != nil {
		r.Problems = append(r.Problems, "bbolt cannot open it: "+err.Error())
		return r, nil
	}
	defer safely(db.Close)
	if r.Problems = inspect(db); len(r.Problems) > 0 {
		return r, nil
	}
	err = safely(func() error {
		return db.View(func(tx *bbolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
				r.Buckets++
				return b.ForEach(func(k, v []byte) error {
					if v == nil {
						return nil
					}
					r.Records++
					if jsonBuckets[string(name)] && !json.Valid(v) {
						r.Problems = append(r.Problems, fmt.Sprintf("bucket %s: record %q is not valid JSON", name, k))
					}
					return nil
				})
			})
		})
	})
	if err != nil {
		r.Problems = append(r.Problems, "reading it failed: "+err.Error())
	}
	return r, nil
}

// copyFile copies src to dst (created with mode, synced), without following dst if it exists.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	return out.Close()
}
