package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/vm"
)

// The upload row (issue 28): a file through the app's upload route into the desktop's
// workspace, next to the engine's `podman cp` of the same file into the same workspace.
const (
	RowUploadThroughput = "upload_throughput"
	// uploadBytes is the file of the row: random bytes (nothing compresses them).
	uploadBytes = 32 << 20
	// uploadChunk is the web UI's chunk (frontend/src/upload.ts: half the server's 8 MiB
	// limit per request).
	uploadChunk = 4 << 20
	// uploadName and peerUploadName are the files in the workspace.
	uploadName     = "cubicle-bench-upload.bin"
	peerUploadName = "cubicle-bench-upload-peer.bin"
)

// uploads times uploads of one file through PUT /api/app/agents/{id}/files/upload of the
// app's HTTP API (the live view's server: auth, guard, the route, the driver's exec), chunk
// after chunk as the web UI sends them, interleaved with `podman cp` of the same file from
// the host into the same workspace. Each copy is removed after it was timed.
func (r *runner) uploads(ctx context.Context, d *desktop) error {
	data := make([]byte, uploadBytes)
	rand.Read(data)
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	hostFile := filepath.Join(r.runRoot, "upload.bin")
	if err := os.WriteFile(hostFile, data, 0o644); err != nil {
		return fault.Unavailable("bench: write %s: %v", hostFile, err)
	}
	defer os.Remove(hostFile)
	ls, err := r.startLive(ctx, d, d.client, "upload.db")
	if err != nil {
		return err
	}
	defer ls.close()
	hc := &http.Client{Timeout: 2 * time.Minute}
	defer hc.CloseIdleConnections()

	ours := func() error { return uploadFile(ctx, hc, ls, uploadName, data) }
	cli := r.cfg.ExecCLI
	peer := func() error {
		dst := d.id + ":" + path.Join(vm.WorkspaceTarget, peerUploadName)
		out, err := exec.CommandContext(ctx, cli, "cp", hostFile, dst).CombinedOutput()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fault.Unavailable("%s cp %s %s: %v: %s", cli, hostFile, dst, err, bytes.TrimSpace(out))
		}
		return nil
	}
	remove := func() error {
		res, err := d.client.Exec(ctx, guest.ExecRequest{Command: []string{"rm", "-f", "--", uploadName, peerUploadName}})
		if err == nil && res.ExitCode != 0 {
			err = fault.Unavailable("bench: remove the uploaded files: exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
		}
		return err
	}
	// Warm-up, and both copies arrived whole.
	if err := ours(); err != nil {
		return err
	}
	if err := peer(); err != nil {
		return err
	}
	for _, name := range []string{uploadName, peerUploadName} {
		res, err := d.client.Exec(ctx, guest.ExecRequest{Command: []string{"sha256sum", "--", name}, Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		if f := bytes.Fields(res.Stdout); res.ExitCode != 0 || len(f) == 0 || string(f[0]) != want {
			return fault.Unavailable("bench: %s in the desktop's workspace is not the uploaded file: exit %d: %s %s", name, res.ExitCode,
				bytes.TrimSpace(res.Stdout), bytes.TrimSpace(res.Stderr))
		}
	}
	if err := remove(); err != nil {
		return err
	}
	mbps := func(into *[]float64, f func() error) func(int) error {
		return func(int) error {
			start := time.Now()
			if err := f(); err != nil {
				return err
			}
			*into = append(*into, float64(uploadBytes)/1e6/time.Since(start).Seconds())
			return remove()
		}
	}
	n := max(r.cfg.Counts.Uploads, 1)
	var o, p []float64
	if err := interleave(ctx, n, n, mbps(&o, ours), mbps(&p, peer)); err != nil {
		return err
	}
	r.add(Row{ID: RowUploadThroughput, Title: fmt.Sprintf("upload of a %d MiB file into the desktop's workspace", uploadBytes>>20),
		Unit: UnitMBps, Better: "higher",
		Ours: Side{Method: fmt.Sprintf("PUT /api/app/agents/{id}/files/upload of the app's HTTP API on loopback (bearer token, guard, the route, the driver's exec "+
			"appending each chunk in the desktop), %d MiB chunks one after the other as the web UI sends them, until the file is in place; "+
			"%d MiB of random bytes, MB = 10^6 bytes", uploadChunk>>20, uploadBytes>>20), Samples: o},
		PeerName: cli + " cp", Peer: &Side{Method: cli + " cp FILE CONTAINER:" + path.Join(vm.WorkspaceTarget, peerUploadName) +
			" of the same file, forked on the host", Samples: p},
		Note: "both copies are checked (SHA-256) once before timing; each timed copy is removed afterwards, untimed"})
	return nil
}

// uploadFile sends data as file name through the upload route of ls in uploadChunk chunks
// and checks that each answer has the bytes so far and the last one the file in place.
func uploadFile(ctx context.Context, hc *http.Client, ls *liveServer, name string, data []byte) error {
	total := len(data)
	for off := 0; off < total; {
		end := min(off+uploadChunk, total)
		q := url.Values{"path": {name}, "offset": {strconv.Itoa(off)}, "total": {strconv.Itoa(total)}}
		u := fmt.Sprintf("http://%s/api/app/agents/%s/files/upload?%s", ls.addr, ls.agent, q.Encode())
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(data[off:end]))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+ls.token)
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fault.Unavailable("bench: upload chunk at %d: %v", off, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err != nil {
			return fault.Unavailable("bench: upload chunk at %d: read the answer: %v", off, err)
		}
		var st struct {
			Offset   int  `json:"offset"`
			Complete bool `json:"complete"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil || st.Offset != end || st.Complete != (end == total) {
			return fault.Unavailable("bench: upload chunk %d–%d of %d: HTTP %d: %s", off, end, total, resp.StatusCode, bytes.TrimSpace(body))
		}
		off = end
	}
	return nil
}
