package engine

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

func TestClampRlimits(t *testing.T) {
	host := HostLimits{NoFile: 20000, NProc: 32768}
	tests := []struct {
		name   string
		want   Limits
		host   HostLimits
		nofile uint64
		nproc  uint64
	}{
		{"above host is clamped", Limits{NoFile: 1 << 30, NProc: 1 << 30}, host, 20000, 32768},
		{"below host is kept", Limits{NoFile: 1024, NProc: 512}, host, 1024, 512},
		{"equal to host", Limits{NoFile: 20000, NProc: 32768}, host, 20000, 32768},
		{"zero takes the default within the host", Limits{}, host, 20000, 32768},
		{"zero with a generous host takes the default", Limits{}, HostLimits{NoFile: ^uint64(0), NProc: ^uint64(0)}, DefaultNoFile, DefaultNProc},
		{"unknown host keeps the request", Limits{NoFile: 1 << 30}, HostLimits{}, 1 << 30, 0},
		{"unknown host and no request sets nothing", Limits{}, HostLimits{}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nofile, nproc := ClampRlimits(tt.want, tt.host)
			if nofile != tt.nofile || nproc != tt.nproc {
				t.Fatalf("ClampRlimits = %d, %d; want %d, %d", nofile, nproc, tt.nofile, tt.nproc)
			}
		})
	}
}

func TestParseProcLimits(t *testing.T) {
	tests := []struct {
		name string
		text string
		want HostLimits
	}{
		{"podman service", `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max processes             32768                32768                processes
Max open files            1024                 20000                files
`, HostLimits{NoFile: 20000, NProc: 32768}},
		{"unlimited", "Max processes             unlimited            unlimited            processes\n", HostLimits{NProc: ^uint64(0)}},
		{"garbage", "Max open files x\n", HostLimits{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseProcLimits(tt.text); got != tt.want {
				t.Fatalf("parseProcLimits = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	in := map[string]string{"a": "1"}
	m := ManagedLabels(in)
	if m[LabelManaged] != "true" || m["a"] != "1" || len(in) != 1 {
		t.Fatalf("ManagedLabels = %v (input now %v)", m, in)
	}
	if got := LabelFilters(map[string]string{"b": "", "a": "x=y"}); !slices.Equal(got, []string{"a=x=y", "b"}) {
		t.Fatalf("LabelFilters = %q", got)
	}
	tests := []struct {
		name string
		have map[string]string
		want map[string]string
		ok   bool
	}{
		{"empty selector", map[string]string{"a": "1"}, nil, true},
		{"equal", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}, true},
		{"different value", map[string]string{"a": "1"}, map[string]string{"a": "2"}, false},
		{"missing key", map[string]string{"a": "1"}, map[string]string{"b": ""}, false},
		{"any value", map[string]string{"b": "zzz"}, map[string]string{"b": ""}, true},
		{"nil labels", nil, map[string]string{"a": "1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MatchLabels(tt.have, tt.want); got != tt.ok {
				t.Fatalf("MatchLabels(%v, %v) = %v", tt.have, tt.want, got)
			}
		})
	}
}

func TestLabelChangesAndCaps(t *testing.T) {
	got, err := LabelChanges(map[string]string{"b": `say "hi"`, "a": "1"})
	if err != nil || !slices.Equal(got, []string{`LABEL a="1"`, `LABEL b="say \"hi\""`}) {
		t.Fatalf("LabelChanges = %q, %v", got, err)
	}
	for _, bad := range []string{"", "a b", "a=b", `a"`} {
		if _, err := LabelChanges(map[string]string{bad: "v"}); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("LabelChanges(key %q) = %v, want ErrInvalid", bad, err)
		}
	}
	if got := NormalizeCaps([]string{"sys_admin", "CAP_SYS_ADMIN", " net_raw ", ""}); !slices.Equal(got, []string{"CAP_SYS_ADMIN", "CAP_NET_RAW"}) {
		t.Fatalf("NormalizeCaps = %q", got)
	}
}

func TestWrap(t *testing.T) {
	base := errors.New("engine said no")
	tests := []struct {
		name   string
		status int
		err    error
		want   error
	}{
		{"404", 404, base, fault.ErrNotFound},
		{"409", 409, base, fault.ErrConflict},
		{"304", 304, base, fault.ErrConflict},
		{"400", 400, base, fault.ErrInvalid},
		{"403", 403, base, fault.ErrForbidden},
		{"500", 500, base, fault.ErrUnavailable},
		{"no answer", 0, fmt.Errorf("dial: %w", os.ErrNotExist), fault.ErrUnavailable},
		{"already classified", 500, fault.NotFound("gone"), fault.ErrNotFound},
		{"cancelled", 0, context.Canceled, fault.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Wrap("do thing", tt.status, tt.err)
			if fault.Class(err) != tt.want {
				t.Fatalf("class = %v, want %v", fault.Class(err), tt.want)
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("%v does not wrap the original error", err)
			}
			if !strings.HasPrefix(err.Error(), "do thing: ") {
				t.Fatalf("message %q lacks the operation", err)
			}
		})
	}
	if Wrap("x", 500, nil) != nil {
		t.Fatal("Wrap(nil) != nil")
	}
	if !errors.Is(Wrap("x", 0, context.Canceled), context.Canceled) {
		t.Fatal("cancellation is not recognisable")
	}
}

func TestExtractTar(t *testing.T) {
	mk := func(entries ...*tar.Header) io.Reader {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		tw.Close()
		return &b
	}
	tests := []struct {
		name    string
		tar     io.Reader
		wantErr bool
		check   string // a file that must exist afterwards
	}{
		{"files and dirs", mk(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3},
			&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d/f"}), false, "d/f"},
		{"parent escape", mk(&tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}), true, ""},
		{"absolute", mk(&tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}), true, ""},
		{"device", mk(&tar.Header{Name: "dev", Typeflag: tar.TypeChar, Mode: 0o644}), true, ""},
		{"not a tar", strings.NewReader(strings.Repeat("garbage!", 200)), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			err := ExtractTar(tt.tar, dir)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ExtractTar = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.check != "" {
				if _, err := os.Stat(filepath.Join(dir, tt.check)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestTarDirRoundTrip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a/b"), 0o755)
	os.WriteFile(filepath.Join(src, "a/b/c.txt"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(src, "Containerfile"), []byte("FROM x\n"), 0o644)
	os.Symlink("a/b/c.txt", filepath.Join(src, "link"))
	rc := TarDir(src)
	defer rc.Close()
	dst := t.TempDir()
	if err := ExtractTar(rc, dst); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a/b/c.txt": "hello", "Containerfile": "FROM x\n", "link": "hello"} {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
}

func TestRegistryDigest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead || !strings.Contains(r.Header.Get("Accept"), "manifest") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/v2/team/app/manifests/v1":
			w.Header().Set("Docker-Content-Digest", "sha256:abc")
		case "/v2/team/app/manifests/nodigest":
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	tests := []struct {
		name  string
		ref   string
		want  string
		class error
	}{
		{"tag", host + "/team/app:v1", "sha256:abc", nil},
		{"missing", host + "/team/app:v2", "", fault.ErrNotFound},
		{"no digest header", host + "/team/app:nodigest", "", fault.ErrUnavailable},
		{"no host", "team/app:v1", "", fault.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RegistryDigest(ctx, tt.ref, true)
			if got != tt.want || fault.Class(err) != tt.class {
				t.Fatalf("RegistryDigest(%s) = %q, %v; want %q, class %v", tt.ref, got, err, tt.want, tt.class)
			}
		})
	}
}

func TestSplitRegistryRef(t *testing.T) {
	tests := []struct{ ref, host, name, tag string }{
		{"localhost:5000/a/b:t", "localhost:5000", "a/b", "t"},
		{"127.0.0.1:5000/a", "127.0.0.1:5000", "a", "latest"},
		{"reg.example.com/a@sha256:00", "reg.example.com", "a", "sha256:00"},
		{"localhost/a:1", "localhost", "a", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			h, n, tag, err := splitRegistryRef(tt.ref)
			if err != nil || h != tt.host || n != tt.name || tag != tt.tag {
				t.Fatalf("= %q %q %q %v", h, n, tag, err)
			}
		})
	}
}
