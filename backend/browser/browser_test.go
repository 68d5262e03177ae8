//go:build linux

package browser

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"cubicle/internal/testenv"
)

// TestSessionOnRealChromium drives a real headless Chromium on loopback through Session:
// navigate, fill a form the server answers, read the answer, screenshot, tabs.
func TestSessionOnRealChromium(t *testing.T) {
	bin := testenv.Program(t, "chromium")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hello" {
			fmt.Fprintf(w, "<html><body><p id=answer>Hello, %s!</p></body></html>", r.URL.Query().Get("name"))
			return
		}
		fmt.Fprint(w, "<html><head><title>Form</title></head><body><form action=/hello><input id=name name=name><button>Send</button></form></body></html>")
	}))
	defer srv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
		fmt.Sprintf("--remote-debugging-port=%d", port), "--user-data-dir="+t.TempDir(), "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Connect(ctx, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	do := func(a Action) Result {
		t.Helper()
		r, err := s.Do(ctx, a)
		if err != nil {
			t.Fatalf("%s: %v", a.Op, err)
		}
		return r
	}
	if r := do(Action{Op: OpNavigate, URL: srv.URL}); r.Title != "Form" {
		t.Fatalf("navigate: %+v", r)
	}
	do(Action{Op: OpType, Selector: "#name", Text: "Ada", Submit: true})
	if r := do(Action{Op: OpRead, Selector: "#answer"}); r.Text != "Hello, Ada!" {
		t.Fatalf("read: %+v", r)
	}
	if r := do(Action{Op: OpScreenshot}); len(r.Image) == 0 {
		t.Fatal("no screenshot")
	}
	r := do(Action{Op: OpNewTab, URL: srv.URL})
	if len(r.Tabs) < 2 {
		t.Fatalf("tabs: %+v", r.Tabs)
	}
	if _, err := s.Do(ctx, Action{Op: OpNavigate, URL: "file:///etc/passwd"}); err == nil || !strings.Contains(err.Error(), "http") {
		t.Fatalf("file URL: %v", err)
	}
}
