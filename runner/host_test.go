package runner

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/sandbox"
	"cubicle/runner/wire"
)

// hostCall serves one host op over a pipe and returns the response; after it, the client's
// end stays open for raw bytes.
func hostCall(t *testing.T, r *Runner, op string, args any) (wire.Response, net.Conn, chan struct{}) {
	t.Helper()
	srv, cli := net.Pipe()
	raw, _ := json.Marshal(args)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer srv.Close()
		r.serveHost(context.Background(), srv, wire.Request{Op: op, Args: raw})
	}()
	var resp wire.Response
	if err := wire.ReadFrame(cli, &resp); err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	return resp, cli, done
}

// serveHost answers one host op as the runner's dispatch table does.
func (r *Runner) serveHost(ctx context.Context, st net.Conn, req wire.Request) {
	r.dispatch()[req.Op](ctx, st, req)
}

func testRunner(noHost bool) *Runner {
	return &Runner{cfg: Config{Name: "box", NoHostTools: noHost}, log: slog.New(slog.DiscardHandler), sandbox: testSandbox()}
}

// TestServeHostRefusesWithoutHostTools: a runner started with --no-host-tools refuses every
// host op itself, whatever a server sends, and runs nothing.
func TestServeHostRefusesWithoutHostTools(t *testing.T) {
	dir := t.TempDir()
	r := testRunner(true)
	for _, op := range []string{wire.OpHostShell, wire.OpHostReadFile, wire.OpHostWriteFile, wire.OpHostHome, wire.OpHostInfo} {
		resp, cli, done := hostCall(t, r, op, wire.HostShellArgs{Command: "touch " + dir + "/ran"})
		<-done
		cli.Close()
		if resp.Error == nil || !strings.Contains(resp.Error.Message, "--no-host-tools") || fault.Class(resp.Error.Err()) != fault.ErrForbidden {
			t.Fatalf("%s on a runner without host tools: %+v", op, resp)
		}
	}
	if hello := testRunnerHello(t, true); strings.Contains(strings.Join(hello.Capabilities, ","), wire.CapHostTools) ||
		strings.Contains(strings.Join(hello.Capabilities, ","), wire.CapHostGuard) {
		t.Fatalf("hello with --no-host-tools: %v", hello.Capabilities)
	}
	if hello := testRunnerHello(t, false); !strings.Contains(strings.Join(hello.Capabilities, ","), wire.CapHostTools) {
		t.Fatalf("hello: %v", hello.Capabilities)
	}
}

func testRunnerHello(t *testing.T, noHost bool) wire.Hello {
	t.Helper()
	r, err := New(Config{Server: "http://127.0.0.1:1", Token: "r-1.secret", DataDir: t.TempDir(), Engine: "none", NoHostTools: noHost})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return r.hello
}

// TestServeHostShellAndFiles: the ops run on this machine within the runner's limits, file
// contents travel raw after the frames, and closing the stream kills the command.
func TestServeHostShellAndFiles(t *testing.T) {
	dir := t.TempDir()
	r := testRunner(false)
	resp, cli, done := hostCall(t, r, wire.OpHostShell, wire.HostShellArgs{Command: "echo hi; echo err >&2; exit 4", Dir: dir, MaxOutput: 1 << 30})
	<-done
	var res wire.HostShellResult
	if resp.Error != nil || json.Unmarshal(resp.Result, &res) != nil || res.ExitCode != 4 || string(res.Stdout) != "hi\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("shell: %+v %+v", resp, res)
	}
	cli.Close()

	// A file written: a header frame, the raw bytes, then the answer.
	data := []byte{0, 1, 2, 255}
	srv, cli := net.Pipe()
	raw, _ := json.Marshal(wire.HostFileArgs{Path: dir + "/f.bin", Size: int64(len(data))})
	go r.serveHost(context.Background(), srv, wire.Request{Op: wire.OpHostWriteFile, Args: raw})
	cli.Write(data)
	var wr wire.Response
	if err := wire.ReadFrame(cli, &wr); err != nil || wr.Error != nil {
		t.Fatalf("write: %+v %v", wr, err)
	}
	cli.Close()
	resp, cli, _ = hostCall(t, r, wire.OpHostReadFile, wire.HostFileArgs{Path: dir + "/f.bin", Max: 100})
	var f wire.HostFile
	json.Unmarshal(resp.Result, &f)
	got := make([]byte, f.Size)
	if _, err := cli.Read(got); err != nil || string(got) != string(data) {
		t.Fatalf("read back %v (%+v): %v", got, resp, err)
	}
	cli.Close()
	resp, cli, _ = hostCall(t, r, wire.OpHostReadFile, wire.HostFileArgs{Path: dir + "/f.bin", Max: 2})
	if resp.Error == nil || fault.Class(resp.Error.Err()) != fault.ErrInvalid {
		t.Fatalf("read over the limit: %+v", resp)
	}
	cli.Close()
	resp, cli, _ = hostCall(t, r, wire.OpHostWriteFile, wire.HostFileArgs{Path: dir + "/big", Size: wire.MaxHostFile + 1})
	if resp.Error == nil || !strings.Contains(resp.Error.Message, "over the") {
		t.Fatalf("write over the limit: %+v", resp)
	}
	cli.Close()

	// Cancel: the server closes the stream; the command's group dies and serveHost returns.
	srv, cli = net.Pipe()
	raw, _ = json.Marshal(wire.HostShellArgs{Command: "sleep 300 & wait", TimeoutMS: 600_000})
	done = make(chan struct{})
	go func() {
		defer close(done)
		r.serveHost(context.Background(), srv, wire.Request{Op: wire.OpHostShell, Args: raw})
	}()
	time.Sleep(200 * time.Millisecond)
	cli.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled host command still runs")
	}
}

// testSandbox is the host sandbox of this machine ($CUBICLE_HOST_SANDBOX forces the kind).
func testSandbox() *sandbox.Sandbox {
	s, err := newSandbox("")
	if err != nil {
		panic(err)
	}
	return s
}

// TestHostForReadable: the credential folders the server says an administrator opened
// (HostSandbox.Readable, an approved widening) are no longer hidden by the runner; the other
// credential folders and the runner's own data directory stay hidden, even when named there.
func TestHostForReadable(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	data := t.TempDir()
	r := &Runner{cfg: Config{DataDir: data}}
	kube, ssh := home+"/.kube", home+"/.ssh"
	policy := func(a *wire.HostSandbox) []string {
		p, err := r.hostFor(context.Background(), a, home).Policy(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return p.Hidden
	}
	has := func(xs []string, x string) bool {
		for _, e := range xs {
			if e == x {
				return true
			}
		}
		return false
	}
	if h := policy(&wire.HostSandbox{}); !has(h, kube) || !has(h, ssh) || !has(h, data) {
		t.Fatalf("without a widening: %v", h)
	}
	h := policy(&wire.HostSandbox{Readable: []string{kube, data, "/etc"}})
	if has(h, kube) || !has(h, ssh) || !has(h, data) {
		t.Fatalf("~/.kube opened (and the data directory named, which must stay hidden): %v", h)
	}
	if h := policy(nil); !has(h, kube) {
		t.Fatalf("an older server: %v", h)
	}
}
