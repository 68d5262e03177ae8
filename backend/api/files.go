package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// This file moves files in and out of an agent's desktop for the live view (docs/api.md,
// "Files in and out"): resumable chunked uploads into the workspace, and a listing and
// download of ~/Downloads and the workspace's top level. Everything goes through the driver's
// exec (a shell in the guest, the arguments in its environment, never in the script), so the
// driver protocol and the desktop image stay as they are.

const (
	// MaxUploadFile caps one uploaded file, and one download.
	MaxUploadFile = 2 << 30
	// MaxUploadChunk caps the body of one upload request.
	MaxUploadChunk = 8 << 20
	// downloadPiece is how much of a file one exec reads while streaming a download.
	downloadPiece = 8 << 20
	// maxListed caps the entries one listing returns.
	maxListed = 2000
)

// fileDriver is what the file routes use of a desktop's driver; *guest.Client has it.
type fileDriver interface {
	Exec(ctx context.Context, r guest.ExecRequest) (guest.ExecResult, error)
}

var _ fileDriver = (*guest.Client)(nil)

// uploadPath is the one route whose body is raw bytes, not JSON (see the guard and jsonBodies).
func uploadPath(r *http.Request) bool {
	if r.Method != http.MethodPut {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/app/agents/")
	if !ok {
		return false
	}
	id, tail, ok := strings.Cut(rest, "/")
	return ok && id != "" && tail == "files/upload"
}

// fileRoutes registers the routes on mux; the live view finds the desktops (without one the
// routes answer 503).
func (s *Server) fileRoutes(mux interface {
	Handle(string, http.Handler)
}) {
	mux.Handle("GET /api/app/agents/{id}/files", s.authed(s.withFiles(s.listFiles)))
	mux.Handle("GET /api/app/agents/{id}/files/upload", s.authed(s.withFiles(s.uploadStatus)))
	mux.Handle("PUT /api/app/agents/{id}/files/upload", s.authed(s.withFiles(s.uploadChunk)))
	mux.Handle("GET /api/app/agents/{id}/files/download", s.authed(s.withFiles(s.downloadFile)))
	mux.Handle("GET /api/app/agents/{id}/files/changes", s.authed(s.withFiles(s.filesChanges)))
}

// dirWatcher is a driver that can wait for a folder to change; *guest.Client is one.
type dirWatcher interface {
	WaitDir(ctx context.Context, path string, timeout time.Duration) (bool, error)
}

var _ dirWatcher = (*guest.Client)(nil)

// Long polls of a folder: how long one waits by default and at most.
const (
	changesWait    = 25 * time.Second
	changesMaxWait = 60 * time.Second
)

// filesChanges: GET …/files/changes?dir=downloads|workspace[&timeout=SECONDS] answers when
// something in the folder changes ({"changed": true}) or when the time runs out (default 25
// s, at most 60: {"changed": false}). The Files drawer follows the folder with it: inotify in
// the desktop, nothing polled. A missing ~/Downloads is made first (browsers make it too).
func (s *Server) filesChanges(w http.ResponseWriter, r *http.Request, d fileDriver) {
	name, err := fileDir(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	timeout := changesWait
	if v := r.URL.Query().Get("timeout"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || time.Duration(n)*time.Second > changesMaxWait {
			writeError(w, r, s.log, fault.Invalid("?timeout=%q: a number of seconds from 1 to %d", v, int(changesMaxWait/time.Second)))
			return
		}
		timeout = time.Duration(n) * time.Second
	}
	wd, ok := d.(dirWatcher)
	if !ok {
		writeError(w, r, s.log, fault.Conflict("this desktop cannot follow a folder; refresh the list instead"))
		return
	}
	path := strings.Replace(guestDir(name), "$HOME/", "~/", 1)
	changed, err := wd.WaitDir(r.Context(), path, timeout)
	if errors.Is(err, fault.ErrNotFound) && name == "downloads" {
		res, merr := d.Exec(r.Context(), guest.ExecRequest{Shell: `mkdir -p "$HOME/Downloads"`, Timeout: 30 * time.Second})
		if merr == nil && res.ExitCode == 0 {
			changed, err = wd.WaitDir(r.Context(), path, timeout)
		}
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"changed": changed})
}

// withFiles checks that the caller may control the agent's desktop (the live view's check:
// the agent is the caller's) and that the desktop runs, then calls h with its driver.
func (s *Server) withFiles(h func(http.ResponseWriter, *http.Request, fileDriver)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := principal(r)
		agentID := r.PathValue("id")
		if _, err := s.cfg.Profiles.Get(p.AccountID, agentID); err != nil {
			writeError(w, r, s.log, err)
			return
		}
		if s.cfg.LiveView == nil {
			writeError(w, r, s.log, fault.Unavailable("the computer channel is not available on this server"))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		d, err := s.cfg.LiveView.Desktop(ctx, p.AccountID, agentID)
		cancel()
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		if d.Kind != "" && d.Kind != "vm" {
			// The host's own screen and the agent's browser have no workspace to fill.
			writeError(w, r, s.log, fault.Conflict("files move in and out of an agent's desktop only, not its %s", d.Kind))
			return
		}
		if d.State != "running" || d.Client == nil {
			writeError(w, r, s.log, fault.Conflict("the agent's desktop is not running (it is %s); start it to move files", orUnknown(d.State)))
			return
		}
		fd, ok := d.Client.(fileDriver)
		if !ok {
			writeError(w, r, s.log, fault.Conflict("this desktop cannot move files"))
			return
		}
		h(w, r, fd)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// cleanRelPath checks a path the person names inside a folder of the desktop: relative, no
// "..", no empty or "." parts, no control characters. The guest checks symbolic links.
func cleanRelPath(p string) (string, error) {
	switch {
	case p == "":
		return "", fault.Invalid("name the file: ?path=<name> (relative to the workspace)")
	case len(p) > 1024:
		return "", fault.Invalid("the path is longer than 1024 bytes")
	case !utf8.ValidString(p):
		return "", fault.Invalid("the path is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return "", fault.Invalid("the path %q is absolute; give it relative to the folder (e.g. report.pdf or data/report.pdf)", p)
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return "", fault.Invalid("the path %q has a control character", p)
		}
	}
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "..":
			return "", fault.Invalid("the path %q leaves the folder (..); give a path inside it", p)
		case "", ".":
			return "", fault.Invalid("the path %q has an empty or \".\" part; write it as %q", p, path.Clean(p))
		}
		if strings.HasSuffix(part, partSuffix) {
			return "", fault.Invalid("names ending in %s are reserved for uploads in progress", partSuffix)
		}
	}
	return p, nil
}

// partSuffix marks the file an upload grows in, next to its destination, until it is complete.
const partSuffix = ".cubicle-upload"

// guestScriptPrelude resolves $CUBICLE_DIR (a folder of the guest: the workspace when empty)
// and $CUBICLE_PATH (relative to it) to $real/$base, exiting 3 when the path's folder does not
// exist and 4 when it resolves outside the folder (a symbolic link). It runs in the workspace.
const guestScriptPrelude = `set -u
ws=$(pwd -P) || exit 1
root=$ws
if [ -n "${CUBICLE_DIR:-}" ]; then
  [ -d "$CUBICLE_DIR" ] || exit 3
  root=$(cd -- "$CUBICLE_DIR" && pwd -P) || exit 3
fi
p=$CUBICLE_PATH
case "$p" in */*) dir=${p%/*} ;; *) dir=. ;; esac
base=${p##*/}
if [ "${CUBICLE_MKDIRS:-}" = 1 ] && [ "$dir" != . ]; then
  # An upload's missing folders are made, one level at a time, never through a symbolic
  # link (the check below then refuses a path that leads outside).
  cur=$root rest=$dir/
  while [ -n "$rest" ]; do
    seg=${rest%%/*} rest=${rest#*/}
    [ -L "$cur/$seg" ] && break
    [ -d "$cur/$seg" ] || mkdir -- "$cur/$seg" || exit 1
    cur=$cur/$seg
  done
fi
[ -d "$root/$dir" ] || exit 3
real=$(cd -- "$root/$dir" && pwd -P) || exit 3
case "$real/" in "$root/"*) ;; *) exit 4 ;; esac
dst=$real/$base
part=$real/.$base` + partSuffix + `
`

// uploadScript appends stdin to the part file when it holds exactly $CUBICLE_OFFSET bytes
// (creating it at offset 0) and renames it into place once it holds $CUBICLE_TOTAL. It
// prints the bytes the part file holds (with "done" once renamed); exit 5: the destination
// is a folder or a symbolic link; 6: no upload in progress at that offset (stdout: the
// bytes there are).
const uploadScript = guestScriptPrelude + `if [ -L "$dst" ] || [ -d "$dst" ] || [ -L "$part" ]; then exit 5; fi
if [ "$CUBICLE_OFFSET" = 0 ]; then : > "$part" || exit 1; fi
have=0
[ -f "$part" ] && have=$(wc -c < "$part")
have=$((have + 0))
if [ "$have" != "$CUBICLE_OFFSET" ]; then echo "$have"; exit 6; fi
cat >> "$part" || exit 1
have=$(($(wc -c < "$part") + 0))
if [ "$have" -gt "$CUBICLE_TOTAL" ]; then rm -f -- "$part"; exit 7; fi
if [ "$have" = "$CUBICLE_TOTAL" ]; then mv -f -- "$part" "$dst" || exit 1; echo "$have done"; exit 0; fi
echo "$have"
`

// uploadStatusScript prints the bytes the part file of $CUBICLE_PATH holds (0: none, also
// when its folder does not exist yet: the upload makes it).
const uploadStatusScript = `case $CUBICLE_PATH in */*) [ -e "${CUBICLE_PATH%/*}" ] || { echo 0; exit 0; } ;; esac
` + guestScriptPrelude + `if [ -L "$part" ]; then exit 5; fi
have=0
[ -f "$part" ] && have=$(wc -c < "$part")
echo $((have + 0))
`

// uploadState is the answer to an upload call: how many bytes of the file have arrived.
type uploadState struct {
	Path     string `json:"path"`
	Offset   int64  `json:"offset"`             // bytes in place (the next chunk starts here)
	Complete bool   `json:"complete,omitempty"` // the file is in place
	Error    string `json:"error,omitempty"`    // with 409: why the chunk was not taken
	Code     string `json:"code,omitempty"`
}

// guestFault turns the exit code of a file script into an error for the person.
func guestFault(res guest.ExecResult, p string) error {
	switch res.ExitCode {
	case 0:
		return nil
	case 3:
		return fault.Invalid("the folder of %q does not exist in the desktop (or a symbolic link in its path was not followed); create it first or upload to the top level", p)
	case 4:
		return fault.Invalid("the path %q leads outside the folder (through a symbolic link); give a path inside it", p)
	case 5:
		return fault.Invalid("%q is a folder or a symbolic link in the desktop; choose another name", p)
	case 7:
		return fault.Invalid("the upload of %q grew past its announced size and was discarded; upload it again", p)
	}
	return fmt.Errorf("desktop file script: exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
}

func (s *Server) uploadStatus(w http.ResponseWriter, r *http.Request, d fileDriver) {
	p, err := cleanRelPath(r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := d.Exec(r.Context(), guest.ExecRequest{Shell: uploadStatusScript, Env: map[string]string{"CUBICLE_PATH": p}, Timeout: 30 * time.Second})
	if err == nil {
		err = guestFault(res, p)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(res.Stdout)), 10, 64)
	if err != nil {
		writeError(w, r, s.log, fmt.Errorf("upload status: %q: %w", res.Stdout, err))
		return
	}
	writeJSON(w, http.StatusOK, uploadState{Path: p, Offset: n})
}

// queryInt reads a non-negative integer parameter.
func queryInt(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fault.Invalid("?%s=%q is not a byte count; send a whole number of bytes (0 or more)", name, v)
	}
	return n, nil
}

func (s *Server) uploadChunk(w http.ResponseWriter, r *http.Request, d fileDriver) {
	p, err := cleanRelPath(r.URL.Query().Get("path"))
	var offset, total int64
	if err == nil {
		offset, err = queryInt(r, "offset")
	}
	if err == nil {
		total, err = queryInt(r, "total")
	}
	if err == nil && total > MaxUploadFile {
		err = fault.Invalid("the file is %.1f GiB; at most %d GiB can be uploaded per file", float64(total)/(1<<30), MaxUploadFile>>30)
	}
	if err == nil && r.ContentLength > MaxUploadChunk {
		err = fault.Invalid("a chunk of %d bytes is over the %d MiB limit per request; send the file in smaller chunks", r.ContentLength, MaxUploadChunk>>20)
	}
	var chunk []byte
	if err == nil {
		chunk, err = io.ReadAll(io.LimitReader(r.Body, MaxUploadChunk+1))
		if err != nil {
			err = fault.Invalid("the chunk could not be read to its end; send it again")
		} else if len(chunk) > MaxUploadChunk {
			err = fault.Invalid("a chunk is over the %d MiB limit per request; send the file in smaller chunks", MaxUploadChunk>>20)
		}
	}
	if err == nil && offset+int64(len(chunk)) > total {
		err = fault.Invalid("the chunk ends at byte %d, past the announced size of %d bytes", offset+int64(len(chunk)), total)
	}
	if err == nil && len(chunk) == 0 && offset != total {
		err = fault.Invalid("the chunk is empty; send the bytes from offset %d", offset)
	}
	if err != nil {
		if r.ContentLength > MaxUploadChunk {
			w.Header().Set("Connection", "close") // do not read what is left of a large body
		}
		writeError(w, r, s.log, err)
		return
	}
	res, err := d.Exec(r.Context(), guest.ExecRequest{Shell: uploadScript, Stdin: chunk, Timeout: 2 * time.Minute, Env: map[string]string{
		"CUBICLE_PATH": p, "CUBICLE_OFFSET": strconv.FormatInt(offset, 10), "CUBICLE_TOTAL": strconv.FormatInt(total, 10),
		"CUBICLE_MKDIRS": "1"}})
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	out := strings.Fields(string(res.Stdout))
	var have int64 = -1
	if len(out) > 0 {
		have, _ = strconv.ParseInt(out[0], 10, 64)
	}
	if res.ExitCode == 6 {
		// Resume from the bytes that are there: the client sends from this offset.
		writeJSON(w, http.StatusConflict, uploadState{Path: p, Offset: have, Code: "conflict",
			Error: fmt.Sprintf("the desktop has %d bytes of %q, not %d; send from offset %d (0 restarts the upload)", have, p, offset, have)})
		return
	}
	if err := guestFault(res, p); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if have < 0 {
		writeError(w, r, s.log, fmt.Errorf("upload: unexpected answer %q", res.Stdout))
		return
	}
	writeJSON(w, http.StatusOK, uploadState{Path: p, Offset: have, Complete: len(out) > 1 && out[1] == "done"})
}

// fileDirs are the folders the downloads panel shows, as the guest's shell names them (""
// is the workspace, where the driver runs commands).
var fileDirs = map[string]string{"workspace": "", "downloads": "$HOME/Downloads"}

func fileDir(r *http.Request) (string, error) {
	name := r.URL.Query().Get("dir")
	if name == "" {
		name = "workspace"
	}
	if _, ok := fileDirs[name]; !ok {
		return "", fault.Invalid("?dir=%q is not a folder the panel shows; use workspace or downloads", name)
	}
	return name, nil
}

// guestDir is the folder as the guest's shell names it; the scripts expand $HOME there.
func guestDir(name string) string { return fileDirs[name] }

// FileEntry is one entry of a folder listing.
type FileEntry struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
	Dir      bool      `json:"dir,omitempty"`
}

// listScript prints the folder's entries (not hidden ones) as "type size mtime name\0",
// nothing when the folder does not exist.
const listScript = `d=${CUBICLE_DIR_RAW:-.}
case "$d" in '$HOME/'*) d=$HOME/${d#'$HOME/'} ;; esac
[ -d "$d" ] || exit 0
find "$d" -mindepth 1 -maxdepth 1 ! -name '.*' -printf '%y %s %T@ %f\0' 2>/dev/null | head -c 4000000
`

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, d fileDriver) {
	name, err := fileDir(r)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := d.Exec(r.Context(), guest.ExecRequest{Shell: listScript, Env: map[string]string{"CUBICLE_DIR_RAW": guestDir(name)}, Timeout: 30 * time.Second, MaxOutput: 4 << 20})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("list %s: exit %d: %s", name, res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	list := parseListing(res.Stdout)
	sort.Slice(list, func(i, j int) bool { return list[i].Modified.After(list[j].Modified) })
	truncated := len(list) > maxListed
	if truncated {
		list = list[:maxListed]
	}
	writeJSON(w, http.StatusOK, struct {
		Dir       string      `json:"dir"`
		Files     []FileEntry `json:"files"`
		Truncated bool        `json:"truncated,omitempty"`
	}{name, list, truncated})
}

// parseListing reads listScript's output; malformed records are skipped.
func parseListing(out []byte) []FileEntry {
	list := []FileEntry{}
	for _, rec := range bytes.Split(out, []byte{0}) {
		f := strings.SplitN(string(rec), " ", 4)
		if len(f) != 4 {
			continue
		}
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		secs, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil || f[3] == "" {
			continue
		}
		if f[0] != "f" && f[0] != "d" {
			continue // symbolic links, sockets…: not offered
		}
		sec := int64(secs)
		list = append(list, FileEntry{Name: f[3], Size: size, Dir: f[0] == "d",
			Modified: time.Unix(sec, int64((secs-float64(sec))*1e9)).UTC().Truncate(time.Millisecond)})
	}
	return list
}

// downloadStatScript checks $CUBICLE_PATH in the folder (symbolic links are followed only
// when they stay inside it) and prints its size; exit 5: not a regular file.
const downloadStatScript = `case "${CUBICLE_DIR_RAW:-}" in '$HOME/'*) CUBICLE_DIR=$HOME/${CUBICLE_DIR_RAW#'$HOME/'} ;; *) CUBICLE_DIR= ;; esac
` + guestScriptPrelude + `[ -e "$dst" ] || exit 8
target=$(readlink -f -- "$dst") || exit 8
case "$target" in "$root/"*) ;; *) exit 4 ;; esac
[ -f "$target" ] || exit 5
printf '%s\n%s\n' "$(wc -c < "$target")" "$target"
`

// downloadPieceScript prints at most $CUBICLE_LEN bytes of $CUBICLE_FILE from $CUBICLE_OFFSET.
const downloadPieceScript = `tail -c +$((CUBICLE_OFFSET + 1)) -- "$CUBICLE_FILE" | head -c "$CUBICLE_LEN"`

func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request, d fileDriver) {
	name, err := fileDir(r)
	var p string
	if err == nil {
		p, err = cleanRelPath(r.URL.Query().Get("path"))
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	res, err := d.Exec(r.Context(), guest.ExecRequest{Shell: downloadStatScript, Timeout: 30 * time.Second,
		Env: map[string]string{"CUBICLE_DIR_RAW": guestDir(name), "CUBICLE_PATH": p}})
	if err == nil && res.ExitCode == 8 {
		err = fault.NotFound("there is no file %q in %s; refresh the list", p, name)
	}
	if err == nil {
		err = guestFault(res, p)
	}
	var size int64
	var target string
	if err == nil {
		lines := strings.SplitN(strings.TrimRight(string(res.Stdout), "\n"), "\n", 2)
		if len(lines) == 2 {
			size, err = strconv.ParseInt(strings.TrimSpace(lines[0]), 10, 64)
			target = lines[1]
		} else {
			err = errors.New("download: unexpected answer from the desktop")
		}
	}
	if err == nil && size > MaxUploadFile {
		err = fault.Invalid("%q is %.1f GiB; at most %d GiB can be downloaded per file", p, float64(size)/(1<<30), MaxUploadFile>>30)
	}
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for off := int64(0); off < size; {
		n := min(int64(downloadPiece), size-off)
		res, err := d.Exec(r.Context(), guest.ExecRequest{Shell: downloadPieceScript, Timeout: 2 * time.Minute, MaxOutput: int(n),
			Env: map[string]string{"CUBICLE_FILE": target, "CUBICLE_OFFSET": strconv.FormatInt(off, 10), "CUBICLE_LEN": strconv.FormatInt(n, 10)}})
		if err == nil && (res.ExitCode != 0 || len(res.Stdout) == 0) {
			err = fmt.Errorf("exit %d, %d bytes: %s", res.ExitCode, len(res.Stdout), bytes.TrimSpace(res.Stderr))
		}
		if err != nil {
			// The status is sent: a short body (Content-Length unmet) tells the client.
			s.log.Warn("download cut short", "path", p, "at", off, "of", size, "err", err)
			return
		}
		if _, err := w.Write(res.Stdout); err != nil {
			return
		}
		rc.Flush()
		off += int64(len(res.Stdout))
	}
}
