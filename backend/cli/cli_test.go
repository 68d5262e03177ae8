package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reading test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testEnv(vars map[string]string) (*env, *syncBuffer, *syncBuffer) {
	out, errb := &syncBuffer{}, &syncBuffer{}
	if vars == nil {
		vars = map[string]string{}
	}
	if _, ok := vars[FirstRunPrepareEnv]; !ok {
		vars[FirstRunPrepareEnv] = "off" // these servers need no image prepared on their first start
	}
	return &env{stdin: strings.NewReader(""), stdout: out, stderr: errb, getenv: func(k string) string { return vars[k] }}, out, errb
}

func TestHelpAndUsage(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			e, out, _ := testEnv(nil)
			if code := run(context.Background(), e, []string{c.name, "--help"}); code != 0 {
				t.Fatalf("exit %d", code)
			}
			if !strings.Contains(out.String(), "Usage: cubicle "+c.name) && !strings.Contains(out.String(), "Usage: cubicle image") {
				t.Fatalf("help output: %q", out)
			}
		})
	}
	e, out, _ := testEnv(nil)
	if code := run(context.Background(), e, []string{"help"}); code != 0 || !strings.Contains(out.String(), "serve") {
		t.Fatalf("help: %d %q", code, out)
	}
	e, _, errb := testEnv(nil)
	if code := run(context.Background(), e, []string{"frobnicate"}); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("unknown command: %d %q", code, errb)
	}
	e, _, errb = testEnv(nil)
	if code := run(context.Background(), e, []string{"serve", "--bogus"}); code != 2 {
		t.Fatalf("bad flag: %d %q", code, errb)
	}
	e, out, _ = testEnv(nil)
	if code := run(context.Background(), e, []string{"version"}); code != 0 || !strings.HasPrefix(out.String(), "cubicle "+Version) {
		t.Fatalf("version: %d %q", code, out)
	}
}

func TestServeRefusesPublicBindWithoutChosenPassword(t *testing.T) {
	dir := t.TempDir()
	e, _, errb := testEnv(nil)
	code := run(context.Background(), e, []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", dir})
	if code != 5 || !strings.Contains(errb.String(), "CUBICLE_ADMIN_PASSWORD") {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	// Nothing was created: a later loopback start still generates the first admin.
	ctx, cancel := context.WithCancel(context.Background())
	e, out, _ := testEnv(nil)
	done := make(chan int)
	go func() { done <- run(ctx, e, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir}) }()
	waitFor(t, out, "with password ")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit %d", code)
	}
}

// The first-start generated password never faces a network, also when the data dir was first
// started on loopback; neither does a weak one. `cubicle admin reset-password` on the
// server's machine sets one that does (issue 15, item 4).
func TestNetworkStartNeedsAChosenStrongPassword(t *testing.T) {
	dir := t.TempDir()
	// A weak first-start password for a network start: refused, and nothing is created.
	e, _, errb := testEnv(map[string]string{"CUBICLE_ADMIN_PASSWORD": "password1"})
	if code := run(context.Background(), e, []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", dir}); code != 5 || !strings.Contains(errb.String(), "not strong enough") {
		t.Fatalf("weak password: exit %d, %q", code, errb)
	}
	// First start on loopback: a generated password.
	ctx, cancel := context.WithCancel(context.Background())
	e, out, _ := testEnv(nil)
	done := make(chan int)
	go func() { done <- run(ctx, e, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir}) }()
	waitFor(t, out, "with password ")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit %d", code)
	}
	// Then on the network: refused, with the way out; CUBICLE_ADMIN_PASSWORD changes nothing now.
	e, _, errb = testEnv(map[string]string{"CUBICLE_ADMIN_PASSWORD": "Strong-but-too-late-7"})
	if code := run(context.Background(), e, []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", dir}); code != 5 || !strings.Contains(errb.String(), "reset-password") {
		t.Fatalf("generated password on the network: exit %d, %q", code, errb)
	}
	// reset-password: a weak one is refused, a strong one (from standard input) is set.
	e, _, errb = testEnv(nil)
	e.stdin = strings.NewReader("weakweak\n")
	if code := run(context.Background(), e, []string{"admin", "reset-password", "--data-dir", dir, "admin"}); code != 2 || !strings.Contains(errb.String(), "too short") {
		t.Fatalf("weak reset: exit %d %q", code, errb)
	}
	e, _, errb = testEnv(nil)
	e.stdin = strings.NewReader("Chosen-by-the-operator-9\n")
	if code := run(context.Background(), e, []string{"admin", "reset-password", "--data-dir", dir, "nobody"}); code != 6 {
		t.Fatalf("unknown user: exit %d %q", code, errb)
	}
	e, out, errb = testEnv(nil)
	e.stdin = strings.NewReader("Chosen-by-the-operator-9\n")
	if code := run(context.Background(), e, []string{"admin", "reset-password", "--data-dir", dir, "admin"}); code != 0 || !strings.Contains(out.String(), "every session of the account has ended") {
		t.Fatalf("reset: exit %d %q %q", code, out, errb)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	e, out, _ = testEnv(nil)
	go func() { done <- run(ctx, e, []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", dir}) }()
	waitFor(t, out, "Listening beyond this machine")
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(out.String())
	resp, err := http.Post(url+"api/auth/login", "application/json", strings.NewReader(`{"username":"admin","password":"Chosen-by-the-operator-9"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("login with the reset password: %d", resp.StatusCode)
	}
	// While serving, the data file is the server's: reset-password says to stop it first.
	e2, _, errb2 := testEnv(nil)
	e2.stdin = strings.NewReader("Chosen-by-the-operator-9\n")
	if code := run(context.Background(), e2, []string{"admin", "reset-password", "--data-dir", dir, "admin"}); code != 3 || !strings.Contains(errb2.String(), "stop the Cubicle server") {
		t.Fatalf("reset while serving: exit %d %q", code, errb2)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit %d", code)
	}
}

// serve --tls-cert/--tls-key serves HTTPS and the session cookie is Secure (issue 15, item 3).
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	vars := map[string]string{"CUBICLE_ADMIN_USER": "boss", "CUBICLE_ADMIN_PASSWORD": "Tls-serving-pass-42"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, out, _ := testEnv(vars)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--tls-cert", cert, "--tls-key", key})
	}()
	url := regexp.MustCompile(`https://127\.0\.0\.1:\d+/`).FindString(waitFor(t, out, "is running at"))
	if url == "" {
		t.Fatalf("no https URL: %q", out)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Post(url+"api/auth/login", "application/json", strings.NewReader(`{"username":"boss","password":"Tls-serving-pass-42"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var secure bool
	for _, c := range resp.Cookies() {
		secure = secure || c.Secure
	}
	if resp.StatusCode != 200 || !secure {
		t.Fatalf("login over TLS: %d, secure cookie %v", resp.StatusCode, secure)
	}
	if h := resp.Header.Get("Strict-Transport-Security"); !strings.HasPrefix(h, "max-age=") {
		t.Fatalf("no HSTS over TLS: Strict-Transport-Security %q", h)
	}
	e2, _, errb := testEnv(nil)
	if code := run(context.Background(), e2, []string{"serve", "--tls-cert", cert}); code != 2 || !strings.Contains(errb.String(), "go together") {
		t.Fatalf("cert without key: %d %q", code, errb)
	}
	cancel()
	<-done
}

func writeSelfSigned(t *testing.T, dir string) (string, string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, key
}

func TestServeEndToEnd(t *testing.T) {
	dir := t.TempDir()
	vars := map[string]string{"CUBICLE_ADMIN_USER": "boss", "CUBICLE_ADMIN_PASSWORD": "pass-word-1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, out, _ := testEnv(vars)
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir}) }()
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(waitFor(t, out, "is running at"))
	if url == "" {
		t.Fatalf("no URL printed: %q", out)
	}
	if !strings.Contains(out.String(), `Log in as "boss"`) {
		t.Fatalf("login not printed: %q", out)
	}
	resp, err := http.Get(url + "api/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"ok":true`) {
		t.Fatalf("health: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Post(url+"api/auth/login", "application/json", strings.NewReader(`{"username":"boss","password":"pass-word-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("login: %d", resp.StatusCode)
	}

	// A second instance on the same data dir is refused clearly, and the first keeps running.
	e2, _, errb2 := testEnv(vars)
	if code := run(context.Background(), e2, []string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dir}); code != 3 || !strings.Contains(errb2.String(), "in use by another Cubicle process") {
		t.Fatalf("second instance: exit %d, %q", code, errb2)
	}
	if resp, err := http.Get(url + "api/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first instance hurt: %v", err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop after cancel")
	}
}

func TestDesktopFallsBackToServeWithoutDisplay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e, out, _ := testEnv(map[string]string{"CUBICLE_LISTEN": "127.0.0.1:0"})
	e.shell = DesktopShell{Available: true, Run: func(ctx context.Context, d Desktop) error {
		t.Error("window opened without a display")
		return nil
	}}
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, []string{"--data-dir", t.TempDir()}) }()
	printed := waitFor(t, out, "is running at")
	if !strings.Contains(printed, "No display found") || !strings.Contains(printed, "serving the web UI instead") {
		t.Fatalf("no fallback note: %q", printed)
	}
	cancel()
	<-done
}

func TestDesktopRunsShellWithLoopbackSession(t *testing.T) {
	e, _, errb := testEnv(map[string]string{"DISPLAY": ":99"})
	var got Desktop
	e.shell = DesktopShell{Origins: []string{"wails://wails"}, Available: true, Run: func(ctx context.Context, d Desktop) error {
		got = d
		req, _ := http.NewRequest("GET", d.URL+"/api/auth/me", nil)
		req.Header.Set("Authorization", "Bearer "+d.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("local session rejected: %d", resp.StatusCode)
		}
		return nil
	}}
	if code := run(context.Background(), e, []string{"--data-dir", t.TempDir()}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if !strings.HasPrefix(got.URL, "http://127.0.0.1:") || got.Token == "" {
		t.Fatalf("desktop = %+v", got)
	}
}

// waitFor waits for s in b; a start talks to the container engine, which a loaded machine
// may answer slowly.
func waitFor(t *testing.T, b *syncBuffer, s string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if out := b.String(); strings.Contains(out, s) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %q in %q", s, b.String())
	return ""
}

func TestDesktopFallsBackToServeWithoutShell(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e, out, _ := testEnv(map[string]string{"CUBICLE_LISTEN": "127.0.0.1:0", "DISPLAY": ":99"})
	e.shell = DesktopShell{Available: false, Run: func(ctx context.Context, d Desktop) error {
		t.Error("stub shell was run")
		return nil
	}}
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, []string{"--data-dir", t.TempDir()}) }()
	if printed := waitFor(t, out, "is running at"); !strings.Contains(printed, "no desktop shell") {
		t.Fatalf("no fallback note: %q", printed)
	}
	cancel()
	<-done
}

func TestImageCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"image"}, 2, "build or list"},
		{[]string{"image", "frob"}, 2, "unknown image subcommand"},
		{[]string{"image", "build"}, 2, "standard or cursor"},
		{[]string{"image", "build", "windows"}, 2, "windows"},
		{[]string{"image", "list", "--engine", "lxc"}, 2, "podman or docker"},
	} {
		e, _, errb := testEnv(nil)
		if code := run(context.Background(), e, tc.args); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, errb)
		}
	}
}

func TestImageListRealEngine(t *testing.T) {
	testenv.PodmanService(t)
	e, out, errb := testEnv(map[string]string{})
	e.getenv = os.Getenv
	if code := run(context.Background(), e, []string{"image", "list", "--work-dir", t.TempDir()}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	for _, want := range []string{"standard", "cursor", "localhost/cubicle-desktop:standard-"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("list lacks %q:\n%s", want, out)
		}
	}
}

// cubicle runner takes serve's engine flags and environment (issue 27 item 5): a cluster's
// settings are checked before anything starts, the flags over CUBICLE_ENGINE/CUBICLE_KUBE*.
func TestRunnerEngineFlags(t *testing.T) {
	base := []string{"runner", "--server", "http://127.0.0.1:1", "--token", "r-1.secret", "--data-dir", t.TempDir()}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--engine", "kubernetes", "--namespace", "ns"}, nil, "no image registry"},
		{[]string{"--engine", "kubernetes", "--registry", "cubicle"}, nil, "host must contain a dot or a port"},
		{nil, map[string]string{"CUBICLE_ENGINE": "kubernetes", "CUBICLE_KUBECONFIG": "/nonexistent/kubeconfig", "CUBICLE_KUBE_REGISTRY": "127.0.0.1:5000"}, "/nonexistent/kubeconfig"},
		{[]string{"--kubeconfig", "/nonexistent/flag-kubeconfig"}, map[string]string{"CUBICLE_ENGINE": "kubernetes", "CUBICLE_KUBECONFIG": "/nonexistent/env", "CUBICLE_KUBE_REGISTRY": "127.0.0.1:5000"}, "/nonexistent/flag-kubeconfig"},
		{[]string{"--engine", "lxc"}, nil, "podman, docker, kubernetes or none"},
	} {
		e, _, errb := testEnv(tc.env)
		if code := run(context.Background(), e, append(append([]string{}, base...), tc.args...)); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v %v: exit %d, stderr %q, want 2 and %q", tc.args, tc.env, code, errb, tc.want)
		}
	}
	e, out, _ := testEnv(nil)
	if code := run(context.Background(), e, []string{"runner", "--help"}); code != 0 {
		t.Fatalf("runner --help: exit %d", code)
	}
	for _, f := range []string{"--engine kubernetes", "-kubeconfig", "-namespace", "-registry", "-registry-insecure", "-storage-class", "kubernetes (the desktops are Pods"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("runner --help does not mention %q:\n%s", f, out)
		}
	}
}
