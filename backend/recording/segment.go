package recording

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"
)

// The segment file format (docs/recording.md). A segment starts with a 24-byte header and
// holds records one after the other; every record carries a CRC-32 of its header and payload,
// so a torn write (the process killed mid-record) or a damaged byte is found when reading,
// and the reader stops at it instead of drawing garbage.
//
//	header:  "CBRS" | version 2 | 3 reserved | recording start (unix ms, int64) | segment start (ms since recording start, uint64)
//	record:  payload length (uint32) | kind (uint8) | flags (uint8) | 2 reserved | at (ms since recording start, uint64)
//	         | payload | CRC-32 (IEEE) of the 16 header bytes and the payload (uint32)
//
// All integers are big-endian. Version 2 added reference keyframes (KindKeyRef); a version 1
// segment is read as it always was (it has none).
const (
	segMagic      = "CBRS"
	segVersion    = 2
	segOldest     = 1 // the oldest version still read
	segHeaderLen  = 24
	recHeaderLen  = 16
	recTrailerLen = 4
	// maxRecord bounds one record's payload: a keyframe of a large screen is a few MB.
	maxRecord = 64 << 20
	// maxSegmentBytes: past this size the next keyframe starts a new segment (whatever
	// Config.SegmentEvery says), so that a seek reads at most this much.
	maxSegmentBytes = 32 << 20
)

// Record kinds.
const (
	// KindUpdate is a version 2 update message of the computer channel, byte for byte.
	KindUpdate byte = 1
	// KindText is a JSON text message of the computer channel (cursor, pointer).
	KindText byte = 2
	// KindKeyRef is a reference keyframe (version 2): it names the regions of earlier update
	// records of the same segment that together draw the whole screen, instead of carrying
	// them (keyref.go). A Reader resolves it into a KindUpdate keyframe at a seek and skips
	// it while playing on; nobody outside this package sees one.
	KindKeyRef byte = 3
)

// Record flags.
const (
	// FlagKey marks an update that is a keyframe (it paints the whole screen).
	FlagKey byte = 1 << 0
)

// Record is one message of a recording.
type Record struct {
	Kind  byte
	Flags byte
	// At is the time since the recording started.
	At time.Duration
	// Data is the message; a reader's records share no memory.
	Data []byte
}

// Key reports whether r is a keyframe (a place a seek can start from).
func (r Record) Key() bool {
	return (r.Kind == KindUpdate || r.Kind == KindKeyRef) && r.Flags&FlagKey != 0
}

// segmentWriter appends records to one segment file. It is not safe for concurrent use (the
// recording's goroutine owns it).
type segmentWriter struct {
	f     *os.File
	w     *bufio.Writer
	bytes int64 // written to the file so far, header included
	start time.Duration
	keys  int
}

// createSegment creates the segment file path for a recording started at began, whose first
// record is at start.
func createSegment(path string, began time.Time, start time.Duration) (*segmentWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("recording: create segment: %w", err)
	}
	var h [segHeaderLen]byte
	copy(h[:4], segMagic)
	h[4] = segVersion
	binary.BigEndian.PutUint64(h[8:], uint64(began.UnixMilli()))
	binary.BigEndian.PutUint64(h[16:], uint64(start.Milliseconds()))
	s := &segmentWriter{f: f, w: bufio.NewWriterSize(f, 256<<10), start: start}
	if _, err := s.w.Write(h[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("recording: write segment header: %w", err)
	}
	s.bytes = segHeaderLen
	return s, nil
}

// write appends one record (buffered: flush makes it survive the process).
func (s *segmentWriter) write(r Record) error {
	if len(r.Data) > maxRecord {
		return fmt.Errorf("recording: a record of %d bytes is larger than %d", len(r.Data), maxRecord)
	}
	var h [recHeaderLen]byte
	binary.BigEndian.PutUint32(h[0:], uint32(len(r.Data)))
	h[4], h[5] = r.Kind, r.Flags
	binary.BigEndian.PutUint64(h[8:], uint64(r.At.Milliseconds()))
	crc := crc32.NewIEEE()
	crc.Write(h[:])
	crc.Write(r.Data)
	var t [recTrailerLen]byte
	binary.BigEndian.PutUint32(t[:], crc.Sum32())
	for _, b := range [][]byte{h[:], r.Data, t[:]} {
		if _, err := s.w.Write(b); err != nil {
			return fmt.Errorf("recording: write record: %w", err)
		}
	}
	s.bytes += int64(recHeaderLen + len(r.Data) + recTrailerLen)
	if r.Key() {
		s.keys++
	}
	return nil
}

// flush hands what is buffered to the operating system (it then survives a kill of the
// process) and, with sync, to the disk (it survives a power cut).
func (s *segmentWriter) flush(sync bool) error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("recording: flush segment: %w", err)
	}
	if sync {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("recording: sync segment: %w", err)
		}
	}
	return nil
}

func (s *segmentWriter) close() error {
	err := s.flush(true)
	return errors.Join(err, s.f.Close())
}

// ErrDamaged is the class of a segment that cannot be read on (a damaged record).
var ErrDamaged = errors.New("recording: damaged segment")

// segmentReader reads the records of one segment file.
type segmentReader struct {
	f     *os.File
	r     *bufio.Reader
	began time.Time     // the recording's start
	start time.Duration // the segment's first record
	off   int64         // offset of the next record
}

// openSegment opens a segment and reads its header.
func openSegment(path string) (*segmentReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("recording: open segment: %w", err)
	}
	s := &segmentReader{f: f, r: bufio.NewReaderSize(f, 256<<10)}
	var h [segHeaderLen]byte
	if _, err := io.ReadFull(s.r, h[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: no header (%v)", ErrDamaged, path, err)
	}
	if string(h[:4]) != segMagic || h[4] < segOldest || h[4] > segVersion {
		f.Close()
		return nil, fmt.Errorf("%w: %s: not a segment of version %d to %d", ErrDamaged, path, segOldest, segVersion)
	}
	s.began = time.UnixMilli(int64(binary.BigEndian.Uint64(h[8:])))
	s.start = time.Duration(binary.BigEndian.Uint64(h[16:])) * time.Millisecond
	s.off = segHeaderLen
	return s, nil
}

// next reads the next record. With skip the payload is read past (not kept, not checked):
// for finding keyframes. At the end it returns io.EOF; a record cut short at the end of the
// file (a write the process did not finish) or whose CRC does not match is ErrDamaged.
func (s *segmentReader) next(skip bool) (Record, int64, error) {
	off := s.off
	var h [recHeaderLen]byte
	n, err := io.ReadFull(s.r, h[:])
	if err == io.EOF {
		return Record{}, off, io.EOF
	}
	if err != nil {
		return Record{}, off, fmt.Errorf("%w: record at %d cut short after %d bytes", ErrDamaged, off, n)
	}
	size := binary.BigEndian.Uint32(h[0:])
	if size > maxRecord {
		return Record{}, off, fmt.Errorf("%w: record at %d claims %d bytes", ErrDamaged, off, size)
	}
	rec := Record{Kind: h[4], Flags: h[5], At: recAt(h)}
	if skip {
		if _, err := s.r.Discard(int(size) + recTrailerLen); err != nil {
			return Record{}, off, fmt.Errorf("%w: record at %d cut short", ErrDamaged, off)
		}
	} else {
		buf := make([]byte, int(size)+recTrailerLen)
		if _, err := io.ReadFull(s.r, buf); err != nil {
			return Record{}, off, fmt.Errorf("%w: record at %d cut short", ErrDamaged, off)
		}
		crc := crc32.NewIEEE()
		crc.Write(h[:])
		crc.Write(buf[:size])
		if crc.Sum32() != binary.BigEndian.Uint32(buf[size:]) {
			return Record{}, off, fmt.Errorf("%w: record at %d fails its checksum", ErrDamaged, off)
		}
		rec.Data = buf[:size:size]
	}
	s.off += int64(recHeaderLen) + int64(size) + recTrailerLen
	return rec, off, nil
}

// recAt is the time of a record header.
func recAt(h [recHeaderLen]byte) time.Duration {
	return time.Duration(binary.BigEndian.Uint64(h[8:])) * time.Millisecond
}

// seek moves to the record at off (an offset next returned).
func (s *segmentReader) seek(off int64) error {
	if _, err := s.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("recording: seek segment: %w", err)
	}
	s.r.Reset(s.f)
	s.off = off
	return nil
}

func (s *segmentReader) close() error { return s.f.Close() }
