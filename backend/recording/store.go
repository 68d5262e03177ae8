package recording

import (
	"bufio"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
)

// Info is a recording as the API lists it (the node contract's shape: a runner answers the
// server's listings with it).
type Info = nodeapi.Recording

// Marker is a moment of a recording worth jumping to.
type Marker = nodeapi.RecordingMarker

// Marker kinds.
const (
	MarkTool    = "tool"
	MarkTurn    = "turn"
	MarkControl = "control"
	MarkDesktop = "desktop"
)

// meta is meta.json: Info without markers (those are in markers.jsonl) plus its shots'
// media types.
type meta struct {
	Info
	Shots map[string]string `json:"shots,omitempty"` // file → media type
}

// Files of a recording's directory.
const (
	metaFile    = "meta.json"
	markersFile = "markers.jsonl"
	segPrefix   = "seg-"
)

// catalog holds every recording of the directory in memory (their metadata and markers;
// never their segments). It is safe for concurrent use.
type catalog struct {
	dir string
	log *slog.Logger

	mu   sync.Mutex
	recs map[string]*entry // guarded by mu
}

// entry is one recording; its fields are guarded by catalog.mu.
type entry struct {
	info  Info
	shots map[string]string
	live  bool // written by this process now
}

// newID returns a recording id: its start time, sortable, and a random tail.
func newID(t time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return t.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// validID reports whether id can be a recording id (no path tricks).
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// openCatalog reads every recording under dir. A recording left open by a process that ended
// without closing it (a crash, kill -9) is closed now: its end is the last record its
// segments hold.
func openCatalog(dir string, log *slog.Logger) (*catalog, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recording: create %s: %w", dir, err)
	}
	c := &catalog{dir: dir, log: log, recs: map[string]*entry{}}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("recording: list %s: %w", dir, err)
	}
	for _, de := range des {
		if !de.IsDir() || !validID(de.Name()) {
			continue
		}
		e, err := c.load(de.Name())
		if err != nil {
			log.Warn("a recording cannot be read; it is left alone", "recording", de.Name(), "err", err)
			continue
		}
		c.recs[e.info.ID] = e
	}
	return c, nil
}

// load reads one recording's metadata and markers, closing it when it was left open.
func (c *catalog) load(id string) (*entry, error) {
	d := filepath.Join(c.dir, id)
	raw, err := os.ReadFile(filepath.Join(d, metaFile))
	if err != nil {
		return nil, fmt.Errorf("read metadata: %w", err)
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("read metadata: %w", err)
	}
	m.ID = id
	ms, notes := readMarkers(filepath.Join(d, markersFile))
	m.Markers = ms
	addNotes(&m.Info, notes...)
	if m.EndedAt.IsZero() || m.Live {
		// Left open: the process ended without closing it. Its end is what its segments hold.
		end, bytes, keys, snotes := scanSegments(d)
		// Its metadata is older than its segments: what they hold counts.
		m.Live = false
		m.DurationMs = end.Milliseconds()
		m.EndedAt = m.StartedAt.Add(time.Duration(m.DurationMs) * time.Millisecond)
		m.Bytes, m.Keyframes = bytes+dirExtraBytes(d), keys
		addNotes(&m.Info, "the recording was not closed (the process recording it stopped abruptly); it ends with the last moment written")
		addNotes(&m.Info, snotes...)
		if err := writeMeta(d, m); err != nil {
			c.log.Warn("close a recording left open", "recording", id, "err", err)
		}
	}
	if m.Markers == nil {
		m.Markers = []Marker{}
	}
	return &entry{info: m.Info, shots: m.Shots}, nil
}

// addNotes adds the notes i does not have yet.
func addNotes(i *Info, notes ...string) {
	for _, n := range notes {
		if !slices.Contains(i.Notes, n) {
			i.Notes = append(i.Notes, n)
		}
	}
}

// scanSegments reads every segment of recording directory d to the end: the time of its
// last good record, its bytes and keyframes, and notes on what was damaged.
func scanSegments(d string) (end time.Duration, bytes int64, keys int, notes []string) {
	segs, _ := listSegments(d)
	for _, p := range segs {
		if fi, err := os.Stat(p); err == nil {
			bytes += fi.Size()
		}
		s, err := openSegment(p)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s skipped: %v", filepath.Base(p), err))
			continue
		}
		for {
			r, _, err := s.next(false)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					notes = append(notes, fmt.Sprintf("%s ends early: %v", filepath.Base(p), err))
				}
				break
			}
			end = max(end, r.At)
			if r.Key() {
				keys++
			}
		}
		s.close()
	}
	return end, bytes, keys, notes
}

// dirExtraBytes are the bytes of a recording's files other than segments.
func dirExtraBytes(d string) int64 {
	var n int64
	des, _ := os.ReadDir(d)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), segPrefix) {
			continue
		}
		if fi, err := de.Info(); err == nil && !fi.IsDir() {
			n += fi.Size()
		}
	}
	return n
}

// listSegments returns the segment files of recording directory d, in order.
func listSegments(d string) ([]string, error) {
	des, err := os.ReadDir(d)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		if strings.HasPrefix(de.Name(), segPrefix) && !de.IsDir() {
			out = append(out, filepath.Join(d, de.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

// readMarkers reads markers.jsonl; a line that cannot be read (the last one, cut by a
// crash) is skipped with a note.
func readMarkers(path string) ([]Marker, []string) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	var (
		out   []Marker
		notes []string
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m struct {
			Marker
			Shot     string `json:"shot,omitempty"`
			ShotType string `json:"shotType,omitempty"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			notes = append(notes, "a marker could not be read and was skipped")
			continue
		}
		m.Marker.Shot, m.Marker.ShotType = m.Shot, m.ShotType
		out = append(out, m.Marker)
	}
	return out, notes
}

// appendMarker writes a marker to markers.jsonl and syncs it.
func appendMarker(d string, m Marker) error {
	line, err := json.Marshal(struct {
		Marker
		Shot     string `json:"shot,omitempty"`
		ShotType string `json:"shotType,omitempty"`
	}{m, m.Shot, m.ShotType})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(d, markersFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("recording: write marker: %w", err)
	}
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Sync(), f.Close())
}

// writeMeta replaces meta.json atomically (a crash leaves the old one or the new one).
func writeMeta(d string, m meta) error {
	m.Markers = nil
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := filepath.Join(d, metaFile+".tmp")
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("recording: write metadata: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d, metaFile)); err != nil {
		return fmt.Errorf("recording: write metadata: %w", err)
	}
	return nil
}

// create starts a new recording's directory and entry.
func (c *catalog) create(info Info) (*entry, string, error) {
	d := filepath.Join(c.dir, info.ID)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, "", fmt.Errorf("recording: create %s: %w", d, err)
	}
	info.Live = true
	if info.Markers == nil {
		info.Markers = []Marker{}
	}
	if err := writeMeta(d, meta{Info: info}); err != nil {
		return nil, "", err
	}
	e := &entry{info: info, shots: map[string]string{}, live: true}
	c.mu.Lock()
	c.recs[info.ID] = e
	c.mu.Unlock()
	return e, d, nil
}

// update changes a recording's entry under the lock and returns a copy of its metadata.
func (c *catalog) update(id string, fn func(*entry)) (meta, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.recs[id]
	if e == nil {
		return meta{}, false
	}
	fn(e)
	return meta{Info: cloneInfo(e.info), Shots: maps(e.shots)}, true
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneInfo(i Info) Info {
	i.AgentIDs = slices.Clone(i.AgentIDs)
	i.Markers = slices.Clone(i.Markers)
	i.Notes = slices.Clone(i.Notes)
	return i
}

// get returns a recording.
func (c *catalog) get(id string) (Info, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.recs[id]
	if e == nil {
		return Info{}, false
	}
	return cloneInfo(e.info), true
}

// list returns the recordings fn keeps, newest first.
func (c *catalog) list(fn func(Info) bool) []Info {
	c.mu.Lock()
	var out []Info
	for _, e := range c.recs {
		if fn(e.info) {
			out = append(out, cloneInfo(e.info))
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Info) int { return cmp.Or(b.StartedAt.Compare(a.StartedAt), strings.Compare(b.ID, a.ID)) })
	if out == nil {
		out = []Info{}
	}
	return out
}

// remove deletes a recording that is not being written.
func (c *catalog) remove(id string) error {
	c.mu.Lock()
	e := c.recs[id]
	if e == nil {
		c.mu.Unlock()
		return fault.NotFound("recording %q not found", id)
	}
	if e.live {
		c.mu.Unlock()
		return fault.Conflict("recording %s is still being written (its desktop runs); stop the desktop first, or wait until it stops", id)
	}
	delete(c.recs, id)
	c.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(c.dir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("recording: remove %s: %w", id, err)
	}
	return nil
}

// shot returns the path and media type of the screenshot of marker i.
func (c *catalog) shot(id string, i int) (string, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.recs[id]
	if e == nil {
		return "", "", fault.NotFound("recording %q not found", id)
	}
	if i < 0 || i >= len(e.info.Markers) || e.info.Markers[i].Shot == "" {
		return "", "", fault.NotFound("marker %d of recording %s has no screenshot", i, id)
	}
	m := e.info.Markers[i]
	return filepath.Join(c.dir, id, m.Shot), cmp.Or(m.ShotType, "image/png"), nil
}

// WriteRecording writes a finished recording into dir (a Service's Dir) as a recorder would:
// one segment per element of segs, each starting with a keyframe. It imports recordings made
// elsewhere, and tests use it. A Service opened on dir afterwards lists it.
func WriteRecording(dir string, info Info, segs [][]Record) error {
	if !validID(info.ID) {
		return fault.Invalid("recording id %q: letters, digits and '-' only", info.ID)
	}
	d := filepath.Join(dir, info.ID)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("recording: create %s: %w", d, err)
	}
	for n, recs := range segs {
		if len(recs) == 0 {
			continue
		}
		w, err := createSegment(filepath.Join(d, fmt.Sprintf("%s%06d", segPrefix, n+1)), info.StartedAt, recs[0].At)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := w.write(r); err != nil {
				w.close()
				return err
			}
			info.DurationMs = max(info.DurationMs, r.At.Milliseconds())
			if r.Key() {
				info.Keyframes++
			}
		}
		info.Bytes += w.bytes
		if err := w.close(); err != nil {
			return err
		}
	}
	for _, m := range info.Markers {
		if err := appendMarker(d, m); err != nil {
			return err
		}
	}
	return writeMeta(d, meta{Info: info})
}
