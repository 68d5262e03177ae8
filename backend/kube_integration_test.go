package backend

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"cubicle/backend/agent"
	"cubicle/backend/engine/kubernetes/kubetest"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/mcpclient"
	"cubicle/backend/models"
	"cubicle/backend/nodeapi"
	"cubicle/backend/screen/screentest"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// kubeEnv is a Backend whose local node runs desktops on the test cluster, with the
// standard image prepared and an agent in operator mode.
type kubeEnv struct {
	b     *Backend
	cl    *kubetest.Cluster
	ctx   context.Context
	img   nodeapi.Image
	admin string
	agent string
}

func newKubeEnv(t *testing.T) *kubeEnv {
	cl := kubetest.Need(t)
	if testing.Short() {
		t.Skip("real cluster test; run without -short")
	}
	dir := t.TempDir()
	log := testenv.Logger(t, slog.LevelInfo)
	kube := store.EngineSettings{Kubeconfig: cl.Kubeconfig, Namespace: cl.Namespace, StorageClass: cl.StorageClass,
		Registry: cl.Registry, RegistryInsecure: true}
	b, err := New(Config{DataDir: dir + "/data", Engine: "kubernetes", Kubernetes: kube, AllowedHosts: []string{"127.0.0.1"}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	storeID := b.Store.Identity().ID
	t.Cleanup(func() { cl.Remove(t, map[string]string{vm.LabelStore: storeID}) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() { b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitEngine(ctx); err != nil {
		t.Fatal(err)
	}
	if g := b.VMs.GuestLink(); g.Primary != "exec" || g.Mount {
		t.Fatalf("guest link on a cluster = %+v, want exec without a mount", g)
	}
	es, err := b.EngineStatus()
	if err != nil || es.Active != "kubernetes" || es.RestartNeeded {
		t.Fatalf("EngineStatus = %+v, %v", es, err)
	}

	var img nodeapi.Image
	t.Run("prepare pushes and the cluster pulls by digest", func(t *testing.T) {
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Minute)
		defer pcancel()
		img, err = b.VMs.Prepare(pctx, "standard")
		if err != nil {
			t.Fatalf("prepare: %v", err)
		}
		if !strings.HasPrefix(img.Ref, cl.Registry+"/cubicle-desktop@sha256:") {
			t.Fatalf("prepared ref %q is not the registry's image by digest", img.Ref)
		}
		t.Logf("prepared %s (driver %s)", img.Ref, img.DriverVersion)
	})
	if img.Ref == "" {
		t.FailNow()
	}
	e := &kubeEnv{b: b, cl: cl, ctx: ctx, img: img}
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Kay")
	if err != nil {
		t.Fatal(err)
	}
	e.admin, e.agent = admin.ID, ag.ID
	return e
}

// shell runs "/shell cmd" as a turn of session and returns the tool's end state and text.
func (e *kubeEnv) shell(t *testing.T, session, cmd string) [2]string {
	t.Helper()
	sctx, scancel := context.WithTimeout(e.ctx, 5*time.Minute)
	defer scancel()
	var evs []agent.Event
	err := e.b.Chat.Run(sctx, agent.Turn{SessionID: session, UserID: e.admin, AgentID: e.agent, AgentName: "Kay", Input: "/shell " + cmd},
		func(ev agent.Event) { evs = append(evs, ev) })
	if err != nil {
		t.Fatalf("/shell %s: %v", cmd, err)
	}
	for _, r := range results(evs) {
		return r
	}
	t.Fatalf("/shell %s: no tool result", cmd)
	return [2]string{}
}

// TestKubernetesDesktop runs an agent's desktop as a Pod of the test cluster (scripts/k8s)
// through the real Backend, as an admin who pointed the node at a kubeconfig would:
// prepare (built with Podman, pushed to the cluster's registry, the probe pod pulls it by
// digest), a chat's /shell creates the desktop, the computer channel shows its live screen
// and a person takes over and types into a terminal, stop/start keeps the workspace file
// across the Pod's deletion, and capacity is refused by the node's policy.
func TestKubernetesDesktop(t *testing.T) {
	e := newKubeEnv(t)
	b, cl, ctx, img, shell := e.b, e.cl, e.ctx, e.img, e.shell
	admin, ag := struct{ ID string }{e.admin}, struct{ ID string }{e.agent}
	var err error

	var inst store.VMInstance
	t.Run("a chat's shell creates the desktop as a pod", func(t *testing.T) {
		r := shell(t, "k1", "echo kept > kept.txt && pwd && id -u")
		if r[0] != agent.StateSuccess || !strings.Contains(r[1], "/home/cua/workspace") || !strings.Contains(r[1], "1000") {
			t.Fatalf("/shell: %v", r)
		}
		if inst, err = instanceOf(b, admin.ID, ag.ID); err != nil {
			t.Fatal(err)
		}
		p, err := cl.Clientset(t).CoreV1().Pods(cl.Namespace).Get(ctx, inst.ContainerName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the desktop's pod: %v", err)
		}
		if c := p.Spec.Containers[0]; c.Image != img.Ref {
			t.Errorf("pod image %q, want the prepared digest %q", c.Image, img.Ref)
		}
		if len(p.Status.ContainerStatuses) == 0 || !strings.HasSuffix(p.Status.ContainerStatuses[0].ImageID, strings.TrimPrefix(img.Ref, cl.Registry+"/cubicle-desktop")) {
			t.Errorf("pod runs image %v, want %s", p.Status.ContainerStatuses, img.Ref)
		}
		for _, v := range p.Spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("the desktop's pod mounts a host path: %+v", v)
			}
		}
	})
	if inst.ID == "" {
		t.FailNow()
	}

	t.Run("MCP both ways on the pod", func(t *testing.T) {
		// The agent uses a stdio MCP server, which runs inside its pod (exec + a tunnel over
		// the exec link), and Cubicle serves the agent's computer at /mcp.
		acct, err := b.Auth.Admin()
		if err != nil {
			t.Fatal(err)
		}
		ap, err := b.Auth.Issue(acct)
		if err != nil {
			t.Fatal(err)
		}
		model := &scriptedModel{}
		msrv := httptest.NewServer(model)
		defer msrv.Close()
		allow := true
		if _, err := b.Models.Set(models.Update{BaseURL: msrv.URL + "/v1", Model: "scripted", AllowPrivate: &allow}); err != nil {
			t.Fatal(err)
		}
		defer func() { // the later subtests' /shell turns run without a model
			if _, err := b.Models.Set(models.Update{}); err != nil {
				t.Error(err)
			}
		}()
		script, err := os.ReadFile("mcpclient/testdata/stdio-server.sh")
		if err != nil {
			t.Fatal(err)
		}
		name, tr, cmd := "sh", mcpclient.TransportStdio, "/bin/sh"
		srv, err := b.MCPClient.Create(ap, mcpclient.Input{Name: &name, Transport: &tr, Command: &cmd, Args: []string{"-c", string(script)},
			Policy: &store.MCPPolicy{Default: "allow"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.MCPClient.SetAgentServers(ap, ag.ID, []string{srv.ID}); err != nil {
			t.Fatal(err)
		}
		defer b.MCPClient.SetAgentServers(ap, ag.ID, []string{})
		model.push(callStep("w", "mcp_sh_whoami", map[string]any{}),
			callStep("p", "computer_shell", map[string]any{"command": "cat /tmp/cubicle-mcp/*.pid; cat kept.txt"}), textStep("done"))
		res := results(turn(t, b, admin.ID, ag.ID, "kmcp", "use the stdio server"))
		if res["w"][0] != agent.StateSuccess || !strings.Contains(res["w"][1], "user=cua ") {
			t.Fatalf("the stdio server in the pod: %+v", res["w"])
		}
		pid := strings.Fields(strings.SplitN(res["w"][1], "pid=", 2)[1])[0]
		// kept.txt was written in the pod's workspace by the first subtest.
		if res["p"][0] != agent.StateSuccess || !strings.Contains(res["p"][1], pid) || !strings.Contains(res["p"][1], "kept") {
			t.Fatalf("the server's process (pid %s) in the pod %s: %+v", pid, inst.ContainerName, res["p"])
		}

		hs := httptest.NewServer(b.API.Handler())
		defer hs.Close()
		_, secret := makeToken(t, hs, ap.Token, map[string]any{"name": "k8s"})
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		cs, err := mcpConnect(t, cctx, hs, secret)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		call := func(tool string, args map[string]any) string {
			t.Helper()
			r, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: args})
			if err != nil || r.IsError {
				t.Fatalf("%s over /mcp: %v %s", tool, err, callText(r))
			}
			return callText(r)
		}
		if l := call("list_computers", nil); !strings.Contains(l, ag.ID) {
			t.Fatalf("list_computers: %s", l)
		}
		if out := call("computer_shell", map[string]any{"agent": ag.ID, "command": "id -un; cat kept.txt; cat /tmp/cubicle-mcp/*.pid"}); !strings.Contains(out, "cua") ||
			!strings.Contains(out, "kept") || !strings.Contains(out, pid) {
			t.Fatalf("computer_shell over /mcp ran elsewhere than the pod %s: %s", inst.ContainerName, out)
		}
	})

	t.Run("live screen, take over and type", func(t *testing.T) {
		srv := httptest.NewServer(b.API.Handler())
		defer srv.Close()
		sess, err := b.LocalSession()
		if err != nil {
			t.Fatal(err)
		}
		u := "ws" + strings.TrimPrefix(srv.URL, "http") + "/api/app/agents/" + ag.ID + "/computer"
		h := http.Header{"Authorization": {"Bearer " + sess.Token}, "Origin": {srv.URL}}
		c, _, err := screentest.Dial(t, u, h, true)
		if err != nil {
			t.Fatalf("the computer channel: %v", err)
		}
		c.Status(30*time.Second, func(st map[string]any) bool { return st["streaming"] == true })
		if _, ok := c.FrameAfter(0, 30*time.Second); !ok {
			t.Fatal("no live frame over the exec link")
		}
		lease := c.Call(map[string]any{"type": "take_over"})
		if lease["type"] != "lease" {
			t.Fatalf("take over: %v", lease)
		}
		input := func(m map[string]any) {
			t.Helper()
			m["type"], m["token"], m["version"], m["frameId"] = "input", lease["token"], lease["version"], c.Frame()
			if r := c.Call(m); r["type"] != "ok" {
				t.Fatalf("input %v: %v", m, r)
			}
		}
		// what happens inside the desktop is looked at through the driver over the exec link
		// (the agent's own tools are refused while a person has control)
		look := func(cmd string) (string, bool) {
			t.Helper()
			lctx, lcancel := context.WithTimeout(ctx, time.Minute)
			defer lcancel()
			g, err := b.VMs.Link(lctx, inst.ID)
			if err != nil {
				t.Fatalf("the driver link: %v", err)
			}
			r, err := g.Exec(lctx, guest.ExecRequest{Shell: cmd})
			if err != nil {
				t.Fatalf("exec %q: %v", cmd, err)
			}
			return string(r.Stdout) + string(r.Stderr), r.ExitCode == 0
		}
		// the lease lives 30 s unless renewed; the waits below take longer on a loaded machine
		renewed := time.Now()
		renew := func() {
			t.Helper()
			if time.Since(renewed) < 5*time.Second {
				return
			}
			r := c.Call(map[string]any{"type": "renew", "token": lease["token"]})
			if r["type"] != "lease" {
				t.Fatalf("renew: %v", r)
			}
			lease["version"], renewed = r["version"], time.Now()
		}
		// The session's shortcut daemon may still be starting on a loaded machine: press
		// ctrl+alt+t again every 10 s until the terminal's process is there.
		deadline := time.Now().Add(90 * time.Second)
		for i := 0; ; i++ {
			if i%10 == 0 {
				c.Quiet(500 * time.Millisecond)
				input(map[string]any{"action": "key", "keys": "ctrl+alt+t"})
			}
			renew()
			if n, _ := look("cat /proc/[0-9]*/comm 2>/dev/null | grep -c xfce4-terminal"); !strings.HasPrefix(strings.TrimSpace(n), "0") {
				break
			}
			if time.Now().After(deadline) {
				d, _ := look("for p in /proc/[0-9]*; do echo \"$(cat $p/comm) $(tr '\\0' ' ' < $p/cmdline)\"; done 2>/dev/null; " +
					"xfconf-query -c xfce4-keyboard-shortcuts -l -v 2>&1 | grep -i -m5 term; timeout 10 xfce4-terminal --version 2>&1 | head -3")
				t.Fatalf("no terminal within 90 s of pressing ctrl+alt+t; the desktop: %v", d)
			}
			time.Sleep(time.Second)
		}
		// it takes the keyboard focus once drawn: wait for a quiet screen, then type, and once
		// more if the first keys went nowhere (they reached the desktop before the terminal)
		// a person clicks into the terminal first (xfwm4 does not give a window launched by
		// a shortcut the focus): its body is the screen's pure black area
		clickTerminal := func() {
			t.Helper()
			g, err := b.VMs.Link(ctx, inst.ID)
			if err != nil {
				t.Fatalf("the driver link: %v", err)
			}
			f, err := g.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"})
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			img, err := png.Decode(bytes.NewReader(f.Data))
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			var n, sx, sy int
			for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 4 {
				for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 4 {
					if r, gr, bl, _ := img.At(x, y).RGBA(); r == 0 && gr == 0 && bl == 0 {
						n, sx, sy = n+1, sx+x, sy+y
					}
				}
			}
			if n < 1000 {
				t.Fatalf("no terminal on the screen (%d black samples)", n)
			}
			renew()
			input(map[string]any{"action": "click", "x": sx / n, "y": sy / n})
		}
		typed := func(within time.Duration) bool {
			c.Quiet(time.Second)
			clickTerminal()
			renew()
			input(map[string]any{"action": "type", "text": "echo typed 你好 > ~/workspace/typed.txt"})
			input(map[string]any{"action": "key", "keys": "Return"})
			deadline := time.Now().Add(within)
			for time.Now().Before(deadline) {
				renew()
				if out, ok := look("cat ~/workspace/typed.txt"); ok && strings.Contains(out, "typed 你好") {
					return true
				}
				time.Sleep(time.Second)
			}
			return false
		}
		if !typed(20*time.Second) && !typed(40*time.Second) {
			if g, err := b.VMs.Link(ctx, inst.ID); err == nil {
				if f, err := g.Screenshot(ctx, guest.ScreenshotOptions{Format: "png"}); err == nil {
					_ = os.MkdirAll("../test-artifacts", 0o755)
					_ = os.WriteFile("../test-artifacts/k8s-typed.png", f.Data, 0o644)
				}
			}
			d, _ := look("ls -la ~ ~/workspace; cat /proc/[0-9]*/comm 2>/dev/null | sort | uniq -c")
			t.Fatalf("what was typed did not reach the desktop: %s", d)
		}
		if r := c.Call(map[string]any{"type": "hand_back", "token": lease["token"]}); r["type"] != "ok" {
			t.Fatalf("hand back: %v", r)
		}
	})

	act := func(t *testing.T, action string) vm.InstanceView {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 5*time.Minute)
		defer acancel()
		v, err := b.VMs.Act(actx, admin.ID, ag.ID, action)
		if err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		return v.Desktop
	}
	t.Run("stop deletes the pod, start keeps the workspace", func(t *testing.T) {
		// Right after the hand back: the hand back cleared the runner's busy mark before it
		// was answered, so this stop is not refused as "in use".
		sctx, scancel := context.WithTimeout(ctx, 5*time.Minute)
		defer scancel()
		v, err := b.VMs.Act(sctx, admin.ID, ag.ID, vm.ActionStop)
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
		if v.Desktop.State != vm.StateStopped {
			t.Fatalf("after stop: %s", v.Desktop.State)
		}
		if _, err := cl.Clientset(t).CoreV1().Pods(cl.Namespace).Get(ctx, inst.ContainerName, metav1.GetOptions{}); err == nil {
			t.Fatal("the pod still exists after stop")
		}
		if v := act(t, vm.ActionStart); v.State != vm.StateRunning {
			t.Fatalf("after start: %s", v.State)
		}
		if r := shell(t, "k3", "cat kept.txt"); r[0] != agent.StateSuccess || !strings.Contains(r[1], "kept") {
			t.Fatalf("the workspace file after the pod was deleted and made again: %v", r)
		}
	})

	t.Run("capacity", func(t *testing.T) {
		if _, err := b.VMs.SetPolicy(ctx, "per-agent", 1); err != nil {
			t.Fatal(err)
		}
		other, err := b.Profiles.Create(admin.ID, "Lee")
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Minute)
		defer acancel()
		_, err = b.VMs.Act(actx, admin.ID, other.ID, vm.ActionCreate)
		if !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "at most 1") {
			t.Fatalf("a second desktop with room for one = %v, want a capacity refusal", err)
		}
		t.Logf("refused by the node's policy: %v", err)
		if _, err := b.VMs.SetPolicy(ctx, "per-agent", 2); err != nil {
			t.Fatal(err)
		}
	})

}

// TestKubernetesAPIServerDown stops the test cluster's API server under a running desktop:
// the node fails closed (the desktop shows unreachable, a tool call is refused saying the
// engine does not answer, nothing is recorded as stopped), and when the API server returns
// it reconciles and the same desktop answers again with its files. It disrupts every user
// of the cluster, so it runs only with CUBICLE_K8S_DISRUPT=1 (scripts/test.sh runs it alone,
// after the other tests).
func TestKubernetesAPIServerDown(t *testing.T) {
	if os.Getenv("CUBICLE_K8S_DISRUPT") != "1" {
		t.Skip("stops the test cluster's API server: run alone with CUBICLE_K8S_DISRUPT=1 (scripts/test.sh does)")
	}
	e := newKubeEnv(t)
	b, cl, ctx, shell := e.b, e.cl, e.ctx, e.shell
	if r := shell(t, "d1", "echo kept > kept.txt"); r[0] != agent.StateSuccess {
		t.Fatalf("/shell: %v", r)
	}
	inst, err := instanceOf(b, e.admin, e.agent)
	if err != nil {
		t.Fatal(err)
	}
	{
		cl.APIServer(t, "stop")
		stopped := true
		defer func() {
			if stopped {
				cl.APIServer(t, "start")
			}
		}()
		waitFor(t, "the node to see the engine unreachable", 60*time.Second, func() bool { return b.VMs.Unreachable() != "" })
		st, err := b.VMs.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range st.Instances {
			if in.ID == inst.ID && (in.Health != vm.HealthUnreachable || in.State != vm.StateRunning) {
				t.Errorf("desktop while the API server is down: state %q health %q, want running and unreachable", in.State, in.Health)
			}
		}
		r := shell(t, "k4", "echo should-not-run")
		if r[0] == agent.StateSuccess || !strings.Contains(r[1], "does not answer") {
			t.Fatalf("a tool call while the API server is down = %v, want a refusal saying the engine does not answer", r)
		}
		t.Logf("refused: %s", r[1])
		cl.APIServer(t, "start")
		stopped = false
		waitFor(t, "the node to reconcile", 2*time.Minute, func() bool { return b.VMs.Unreachable() == "" })
		if r := shell(t, "k5", "cat kept.txt"); r[0] != agent.StateSuccess || !strings.Contains(r[1], "kept") {
			t.Fatalf("after the API server returned: %v", r)
		}
	}
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
