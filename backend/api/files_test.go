package api

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
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/backend/liveview"
	"cubicle/backend/screen/screentest"
)

// filesCall sends one request to the file routes and returns the status and body.
func filesCall(t *testing.T, e *liveEnv, token, method, agent, route string, q url.Values, body []byte) (int, []byte, http.Header) {
	t.Helper()
	u := e.ts.URL + "/api/app/agents/" + agent + "/files" + route + "?" + q.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, u, err)
	}
	return resp.StatusCode, b, resp.Header
}

func upQuery(path string, offset, total int64) url.Values {
	return url.Values{"path": {path}, "offset": {fmt.Sprint(offset)}, "total": {fmt.Sprint(total)}}
}

// guestSHA256 hashes a file inside the desktop with the desktop's own sha256sum.
func guestSHA256(t *testing.T, c *guest.Client, path string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), guest.ExecRequest{Command: []string{"sha256sum", "--", path}, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sha256sum %s in the desktop: %v, exit %d: %s", path, err, res.ExitCode, res.Stderr)
	}
	return strings.Fields(string(res.Stdout))[0]
}

// TestFilesUploadAndDownload moves files in and out of a real driver over the real routes: a
// 20 MiB file in three chunks with an interruption and a resume lands whole (sha256sum in the
// desktop), traversal, symbolic-link escapes and oversize are refused with nothing written, a
// member who does not own the agent gets nothing, and the download returns the same bytes.
func TestFilesUploadAndDownload(t *testing.T) {
	d := screentest.Start(t, 137, 320, 200)
	e := newLiveEnv(t)
	f := e.f
	agent := f.newAgent(f.admin, "files")
	host, stopped := f.newAgent(f.admin, "host screen"), f.newAgent(f.admin, "stopped")
	e.desktops.set(agent, liveview.Desktop{ID: "desk-files", State: "running", Client: d.Client})
	wsRes, err := d.Client.Exec(context.Background(), guest.ExecRequest{Shell: "pwd -P"})
	if err != nil {
		t.Fatal(err)
	}
	ws := strings.TrimSpace(string(wsRes.Stdout))

	data := make([]byte, 20<<20)
	rand.Read(data)
	sum := sha256.Sum256(data)
	total := int64(len(data))
	const chunk = 7 << 20

	t.Run("upload in chunks with a resume", func(t *testing.T) {
		code, body, _ := filesCall(t, e, f.admin, "PUT", agent, "/upload", upQuery("big.bin", 0, total), data[:chunk])
		if code != 200 || !strings.Contains(string(body), fmt.Sprintf(`"offset":%d`, chunk)) {
			t.Fatalf("first chunk: %d %s", code, body)
		}
		// The second chunk is cut off: the client went away after sending half of it.
		req, _ := http.NewRequest("PUT", e.ts.URL+"/api/app/agents/"+agent+"/files/upload?"+upQuery("big.bin", chunk, total).Encode(),
			io.MultiReader(bytes.NewReader(data[chunk:chunk+chunk/2]), errReader{}))
		req.Header.Set("Authorization", "Bearer "+f.admin)
		req.Header.Set("Content-Type", "application/octet-stream")
		req.ContentLength = chunk
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Logf("interrupted chunk answered %d", resp.StatusCode)
		}
		// A resend at a stale offset is refused with where to resume.
		code, body, _ = filesCall(t, e, f.admin, "PUT", agent, "/upload", upQuery("big.bin", 2*chunk, total), data[2*chunk:])
		if code != http.StatusConflict {
			t.Fatalf("chunk at a wrong offset: %d %s, want 409", code, body)
		}
		code, body, _ = filesCall(t, e, f.admin, "GET", agent, "/upload", url.Values{"path": {"big.bin"}}, nil)
		var st uploadState
		if code != 200 || json.Unmarshal(body, &st) != nil {
			t.Fatalf("status: %d %s", code, body)
		}
		if st.Offset != chunk {
			t.Fatalf("after the interruption the desktop has %d bytes, want %d", st.Offset, chunk)
		}
		if _, err := os.Stat(filepath.Join(ws, "big.bin")); err == nil {
			t.Fatal("the file is in place before its last chunk")
		}
		for off := st.Offset; off < total; {
			end := min(off+chunk, total)
			code, body, _ = filesCall(t, e, f.admin, "PUT", agent, "/upload", upQuery("big.bin", off, total), data[off:end])
			if code != 200 || json.Unmarshal(body, &st) != nil || st.Offset != end {
				t.Fatalf("chunk at %d: %d %s", off, code, body)
			}
			off = end
		}
		if !st.Complete {
			t.Fatalf("last chunk did not complete the file: %+v", st)
		}
		if got := guestSHA256(t, d.Client, filepath.Join(ws, "big.bin")); got != hex.EncodeToString(sum[:]) {
			t.Fatalf("sha256 in the desktop %s, want %x", got, sum)
		}
		left, _ := filepath.Glob(filepath.Join(ws, ".*"+partSuffix))
		if len(left) != 0 {
			t.Fatalf("part files left: %v", left)
		}
	})

	escaped := t.TempDir()
	if err := os.Symlink(escaped, filepath.Join(ws, "escape")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("outside"), 0o644)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "host.txt"), []byte("host file"), 0o644)
	os.Symlink(filepath.Join(outside, "host.txt"), filepath.Join(ws, "hostlink"))

	t.Run("refusals write nothing", func(t *testing.T) {
		tests := []struct {
			name, token, path string
			total             int64
			want              int
		}{
			{"dot dot", f.admin, "../x.bin", 3, 400},
			{"dot dot inside", f.admin, "a/../../x.bin", 3, 400},
			{"absolute", f.admin, "/tmp/x.bin", 3, 400},
			{"symbolic link out", f.admin, "escape/x.bin", 3, 400},
			{"a folder through a symbolic link", f.admin, "escape/sub/x.bin", 3, 400},
			{"over 2 GiB", f.admin, "huge.bin", MaxUploadFile + 1, 400},
			{"not the owner", f.user, "bob.bin", 3, 404},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				code, body, _ := filesCall(t, e, tc.token, "PUT", agent, "/upload", upQuery(tc.path, 0, tc.total), []byte("abc"))
				if code != tc.want {
					t.Fatalf("%s: %d %s, want %d", tc.path, code, body, tc.want)
				}
				if tc.want == 400 && !strings.Contains(string(body), `"code":"invalid"`) {
					t.Fatalf("body %s", body)
				}
			})
		}
		var found []string
		for _, root := range []string{filepath.Dir(ws), escaped} {
			filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
				if err == nil && (strings.HasSuffix(p, "x.bin") || strings.HasSuffix(p, "huge.bin") || strings.HasSuffix(p, "bob.bin") || strings.Contains(p, partSuffix)) {
					found = append(found, p)
				}
				return nil
			})
		}
		if len(found) != 0 {
			t.Fatalf("refused uploads wrote %v", found)
		}
		if ents, _ := os.ReadDir(escaped); len(ents) != 0 {
			t.Fatalf("a refused upload made %v behind the symbolic link", ents)
		}
		code, body, _ := filesCall(t, e, f.admin, "PUT", agent, "/upload", upQuery("big2.bin", 0, 16<<20), make([]byte, MaxUploadChunk+1))
		if code != 400 || !strings.Contains(string(body), "8 MiB") {
			t.Fatalf("oversize chunk: %d %s", code, body)
		}
	})

	t.Run("an upload makes its missing folders", func(t *testing.T) {
		// A dropped folder: its files come one by one, each with its path in the folder.
		code, body, _ := filesCall(t, e, f.admin, "GET", agent, "/upload", url.Values{"path": {"made/deep/in.bin"}}, nil)
		if code != 200 || !strings.Contains(string(body), `"offset":0`) {
			t.Fatalf("status of a file in a folder not made yet: %d %s, want offset 0", code, body)
		}
		if _, err := os.Stat(filepath.Join(ws, "made")); !os.IsNotExist(err) {
			t.Fatalf("asking the status made the folder (%v)", err)
		}
		code, body, _ = filesCall(t, e, f.admin, "PUT", agent, "/upload", upQuery("made/deep/in.bin", 0, 3), []byte("abc"))
		if code != 200 || !strings.Contains(string(body), `"complete":true`) {
			t.Fatalf("upload into missing folders: %d %s", code, body)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "made", "deep", "in.bin")); err != nil || string(b) != "abc" {
			t.Fatalf("the file in the made folders: %q, %v", b, err)
		}
		code, body, _ = filesCall(t, e, f.admin, "PUT", agent, "/upload", upQuery("made/second.bin", 0, 2), []byte("de"))
		if code != 200 {
			t.Fatalf("a second file into a made folder: %d %s", code, body)
		}
	})

	t.Run("a folder is followed: the answer comes with a change", func(t *testing.T) {
		if code, body, _ := filesCall(t, e, f.admin, "GET", agent, "/changes", url.Values{"dir": {"workspace"}, "timeout": {"1"}}, nil); code != 200 ||
			string(body) != `{"changed":false}`+"\n" {
			t.Fatalf("a quiet folder: %d %s, want changed false after 1 s", code, body)
		}
		type answer struct {
			code int
			body string
		}
		got := make(chan answer, 1)
		go func() {
			code, body, _ := filesCall(t, e, f.admin, "GET", agent, "/changes", url.Values{"dir": {"workspace"}, "timeout": {"20"}}, nil)
			got <- answer{code, string(body)}
		}()
		time.Sleep(500 * time.Millisecond)
		select {
		case a := <-got:
			t.Fatalf("answered before anything changed: %+v", a)
		default:
		}
		if code, body, _ := filesCall(t, e, f.admin, "PUT", agent, "/upload", upQuery("new.txt", 0, 3), []byte("new")); code != 200 {
			t.Fatalf("upload: %d %s", code, body)
		}
		select {
		case a := <-got:
			if a.code != 200 || a.body != `{"changed":true}`+"\n" {
				t.Fatalf("after an upload: %+v, want changed true", a)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no answer within 10 s of the change")
		}
		for _, tc := range []struct {
			q    url.Values
			tok  string
			want int
		}{
			{url.Values{"dir": {"workspace"}, "timeout": {"61"}}, f.admin, 400},
			{url.Values{"dir": {"workspace"}, "timeout": {"soon"}}, f.admin, 400},
			{url.Values{"dir": {"etc"}}, f.admin, 400},
			{url.Values{"dir": {"workspace"}, "timeout": {"1"}}, f.user, 404},
		} {
			if code, body, _ := filesCall(t, e, tc.tok, "GET", agent, "/changes", tc.q, nil); code != tc.want {
				t.Errorf("changes %v: %d %s, want %d", tc.q, code, body, tc.want)
			}
		}
	})
	t.Run("list and download", func(t *testing.T) {
		code, body, _ := filesCall(t, e, f.admin, "GET", agent, "", url.Values{"dir": {"workspace"}}, nil)
		var list struct{ Files []FileEntry }
		if code != 200 || json.Unmarshal(body, &list) != nil {
			t.Fatalf("list: %d %s", code, body)
		}
		var big *FileEntry
		for i := range list.Files {
			if list.Files[i].Name == "big.bin" {
				big = &list.Files[i]
			}
		}
		if big == nil || big.Size != total || time.Since(big.Modified) > time.Hour {
			t.Fatalf("big.bin in the list: %+v (list %s)", big, body)
		}
		code, got, h := filesCall(t, e, f.admin, "GET", agent, "/download", url.Values{"dir": {"workspace"}, "path": {"big.bin"}}, nil)
		if code != 200 || !bytes.Equal(got, data) {
			t.Fatalf("download: %d, %d bytes, equal %v", code, len(got), bytes.Equal(got, data))
		}
		if cd := h.Get("Content-Disposition"); cd != `attachment; filename=big.bin` {
			t.Fatalf("Content-Disposition %q", cd)
		}
		for _, tc := range []struct {
			q    url.Values
			tok  string
			want int
		}{
			{url.Values{"dir": {"workspace"}, "path": {"hostlink"}}, f.admin, 400},
			{url.Values{"dir": {"workspace"}, "path": {"../secret.txt"}}, f.admin, 400},
			{url.Values{"dir": {"workspace"}, "path": {"missing"}}, f.admin, 404},
			{url.Values{"dir": {"etc"}, "path": {"passwd"}}, f.admin, 400},
			{url.Values{"dir": {"workspace"}, "path": {"big.bin"}}, f.user, 404},
		} {
			if code, body, _ := filesCall(t, e, tc.tok, "GET", agent, "/download", tc.q, nil); code != tc.want {
				t.Errorf("download %v: %d %s, want %d", tc.q, code, body, tc.want)
			}
		}
		if code, body, _ := filesCall(t, e, f.user, "GET", agent, "", url.Values{"dir": {"workspace"}}, nil); code != 404 {
			t.Errorf("a member lists another's files: %d %s", code, body)
		}
		e.desktops.set(host, liveview.Desktop{ID: "host", Kind: "host", State: "running", Client: d.Client})
		if code, body, _ := filesCall(t, e, f.admin, "GET", host, "", url.Values{"dir": {"workspace"}}, nil); code != http.StatusConflict {
			t.Errorf("files of the host's screen: %d %s, want 409", code, body)
		}
		e.desktops.set(stopped, liveview.Desktop{ID: "desk-stopped", State: "stopped"})
		if code, body, _ := filesCall(t, e, f.admin, "PUT", stopped, "/upload", upQuery("a.txt", 0, 3), []byte("abc")); code != http.StatusConflict {
			t.Errorf("upload to a stopped desktop: %d %s, want 409", code, body)
		}
	})
}

// errReader fails, cutting a request body off.
type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestCleanRelPath(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"a.txt", true}, {"dir/a.txt", true}, {"..a", true},
		{"", false}, {"/etc/passwd", false}, {"..", false}, {"a/../b", false}, {"a//b", false},
		{"./a", false}, {"a/", false}, {"a\nb", false}, {"x" + partSuffix, false},
	} {
		if _, err := cleanRelPath(tc.in); (err == nil) != tc.ok {
			t.Errorf("cleanRelPath(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}

func TestParseListing(t *testing.T) {
	out := []byte("f 12 1700000000.5000000000 a b.txt\x00d 4096 1700000001.0 sub\x00l 3 1700000000.0 link\x00garbage\x00")
	got := parseListing(out)
	if len(got) != 2 || got[0].Name != "a b.txt" || got[0].Size != 12 || got[1].Name != "sub" || !got[1].Dir ||
		got[0].Modified != time.Unix(1700000000, 5e8).UTC() {
		t.Fatalf("parseListing = %+v", got)
	}
}
