package mcpclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/guest"
	"cubicle/backend/store"
	"cubicle/internal/testenv"
)

// localDesk runs the bridge on this machine, as a desktop's driver would (exec as a plain
// process, tunnels as TCP to loopback): the bridge, sh, Perl and the server are all real.
type localDesk struct {
	t   *testing.T
	dir string
}

func (d localDesk) desk() Desk {
	return Desk{
		Exec: func(ctx context.Context, r guest.ExecRequest) (guest.ExecResult, error) {
			argv := r.Command
			for i, a := range argv { // keep the state files in the test's directory
				argv[i] = strings.ReplaceAll(a, stateDir, d.dir)
			}
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir = d.dir
			cmd.Env = os.Environ()
			for k, v := range r.Env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code, err = ee.ExitCode(), nil
			}
			return guest.ExecResult{ExitCode: code, Stdout: out.Bytes(), Stderr: errb.Bytes()}, err
		},
		Tunnel: func(ctx context.Context, address string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "tcp", address)
		},
	}
}

type localDesktops struct{ d localDesk }

func (l localDesktops) Key(t agent.TurnInfo) (string, error) { return "agent-" + t.AgentID, nil }
func (l localDesktops) Spawn(ctx context.Context, t agent.TurnInfo, p Process) (io.ReadWriteCloser, error) {
	return StartInDesk(ctx, l.d.desk(), p)
}

func needPerl(t *testing.T) {
	for _, bin := range []string{"perl", "setsid", "sh"} {
		testenv.Program(t, bin)
	}
}

// TestStdioServer runs a stdio MCP server through the bridge and the whole client: listed,
// called (with a sealed environment value), killed by a call and started again at the next
// use, stopped at Close.
func TestStdioServer(t *testing.T) {
	needPerl(t)
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	admin := store.Account{ID: "acc1", Username: "admin", Role: store.RoleAdmin}
	if err := st.CreateAccount(admin); err != nil {
		t.Fatal(err)
	}
	ag := store.Agent{ID: "ag1", AccountID: admin.ID, Name: "Ada"}
	if err := st.CreateAgent(ag); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("testdata/stdio-server.sh")
	s, err := New(Config{Store: st, Key: make([]byte, 32), Desktops: localDesktops{localDesk{t, dir}}})
	if err != nil {
		t.Fatal(err)
	}
	p := auth.Principal{AccountID: admin.ID, Username: "admin", Role: store.RoleAdmin}
	name, tr, cmd, sec := "sh", TransportStdio, "/bin/sh", "env-secret-1234567"
	srv, err := s.Create(p, Input{Name: &name, Transport: &tr, Command: &cmd, Args: []string{script},
		Env: map[string]*string{"MCP_TEST_SECRET": &sec}, Policy: &store.MCPPolicy{Default: Allow}})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Env["MCP_TEST_SECRET"] != "••••4567" {
		t.Fatalf("env shown as %q", srv.Env["MCP_TEST_SECRET"])
	}
	if _, err := s.SetAgentServers(p, ag.ID, []string{srv.ID}); err != nil {
		t.Fatal(err)
	}
	ti := agent.TurnInfo{SessionID: "s", UserID: admin.ID, AgentID: ag.ID, TurnID: "t"}
	ctx := context.Background()
	specs := s.Tools(ctx, ti)
	if len(specs) != 3 || specs[0].Name != "mcp_sh_whoami" || specs[1].Name != "mcp_sh_die" || specs[2].Name != "mcp_sh_peek" {
		t.Fatalf("tools: %+v", specs)
	}
	call := func(id, tool string) (string, string) {
		out := agent.NewToolOutput(id, func(agent.Event) {})
		st := s.Call(ctx, ti, agent.ToolCall{ID: id, Name: tool, Input: map[string]any{}}, out)
		text := ""
		for _, b := range out.Blocks() {
			text += b.Text
		}
		return st, text
	}
	st1, out1 := call("c1", "mcp_sh_whoami")
	if st1 != agent.StateSuccess || !strings.Contains(out1, "secret="+sec) {
		t.Fatalf("whoami: %s %q", st1, out1)
	}
	st2, out2 := call("c2", "mcp_sh_die")
	t.Logf("a call that kills the server: %s %q", st2, out2)
	if st, out := st2, out2; st != agent.StateError {
		t.Fatalf("die: %s %q", st, out)
	}
	st3, out3 := call("c3", "mcp_sh_whoami")
	if st3 != agent.StateSuccess || out3 == out1 { // another pid: started again
		t.Fatalf("after the server died: %s %q (before: %q)", st3, out3, out1)
	}
	pid := strings.Fields(strings.SplitN(out3, "pid=", 2)[1])[0]
	// Killed from outside (as when the desktop stops): the session is dropped as it ends, so
	// the next call starts the server again instead of failing.
	if err := exec.Command("kill", "-KILL", pid).Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for exec.Command("kill", "-0", pid).Run() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the session sees the end of its stream
	st4, out4 := call("c4", "mcp_sh_whoami")
	if st4 != agent.StateSuccess || out4 == out3 {
		t.Fatalf("the first call after the server was killed: %s %q", st4, out4)
	}
	pid = strings.Fields(strings.SplitN(out4, "pid=", 2)[1])[0]
	s.Close()
	deadline = time.Now().Add(5 * time.Second)
	for exec.Command("kill", "-0", pid).Run() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the server (pid %s) still runs after Close", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStdioSlowStart: a stdio server's start may take its own timeout when that is longer
// than the connect timeout (npx downloading the package first), and not longer.
func TestStdioSlowStart(t *testing.T) {
	needPerl(t)
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	admin := store.Account{ID: "acc1", Username: "admin", Role: store.RoleAdmin}
	if err := st.CreateAccount(admin); err != nil {
		t.Fatal(err)
	}
	ag := store.Agent{ID: "ag1", AccountID: admin.ID, Name: "Ada"}
	if err := st.CreateAgent(ag); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("testdata/stdio-server.sh")
	s, err := New(Config{Store: st, Key: make([]byte, 32), Desktops: localDesktops{localDesk{t, dir}}, ConnectTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := auth.Principal{AccountID: admin.ID, Username: "admin", Role: store.RoleAdmin}
	var ids []string
	for _, c := range []struct {
		name    string
		timeout int
	}{{"slow", 5}, {"slower", 1}} {
		tr, cmd, timeout := TransportStdio, "/bin/sh", c.timeout
		srv, err := s.Create(p, Input{Name: &c.name, Transport: &tr, Command: &cmd, Args: []string{"-c", "sleep 2; exec sh " + script},
			TimeoutSeconds: &timeout, Policy: &store.MCPPolicy{Default: Allow}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, srv.ID)
	}
	if _, err := s.SetAgentServers(p, ag.ID, ids); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sp := range s.Tools(context.Background(), agent.TurnInfo{SessionID: "s", UserID: admin.ID, AgentID: ag.ID, TurnID: "t"}) {
		names = append(names, sp.Name)
	}
	// slow starts in 2 s, past the 300 ms connect timeout but within its own 5 s; slower's
	// own 1 s is too short.
	if got := strings.Join(names, " "); got != "mcp_slow_whoami mcp_slow_die mcp_slow_peek" {
		t.Fatalf("tools of a slow-starting server: %q", got)
	}
}
