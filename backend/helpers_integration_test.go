package backend

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/engine"
	"cubicle/backend/models"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// TestHelperOnTaskDesktop drives the real runtime with a scripted model: the main agent hands
// a task to a temporary helper, whose computer tools run in a new task-isolated desktop (a real
// container of the real standard image) that is removed when the task ends; the agent's
// persistent workspace is never touched; a full node refuses a task desktop with a clear
// error.
func TestHelperOnTaskDesktop(t *testing.T) {
	b, dir, ctx := startOnRealDesktop(t, slog.LevelInfo)
	eng := b.engine.Client
	var agentID string
	var inst store.VMInstance
	defer func() {
		b.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		// Only what this test made: its agent's desktop, its volumes, and any task desktop
		// of its agent (there should be none left).
		if agentID != "" {
			if ctrs, err := eng.ListContainers(cctx, map[string]string{vm.LabelAgent: agentID}); err == nil {
				for _, c := range ctrs {
					eng.RemoveContainer(cctx, c.ID, true)
				}
			}
		}
		if inst.ID == "" {
			return
		}
		eng.RemoveContainer(cctx, inst.ContainerName, true)
		if v, ok := eng.(interface {
			RemoveVolume(ctx context.Context, name string) error
		}); ok {
			v.RemoveVolume(cctx, inst.WorkspaceVol)
			v.RemoveVolume(cctx, inst.ProfileVol)
		}
	}()
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	agentID = ag.ID
	// Even with the host environment allowed for the agent, its helper gets no host tools.
	if _, err := b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error {
		a.Computer, a.AllowHostEnvironment = "vm", true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	taskCtrs := func() []engine.ContainerState {
		lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer lcancel()
		ctrs, err := eng.ListContainers(lctx, map[string]string{vm.LabelRole: vm.RoleTask, vm.LabelAgent: ag.ID})
		if err != nil {
			t.Errorf("list task desktops: %v", err)
		}
		return ctrs
	}

	// The scripted model; while the helper works, the test looks at the engine.
	model := &scriptedModel{}
	var mu sync.Mutex
	var during []engine.ContainerState // task desktops seen while the helper worked
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		n := requests
		mu.Unlock()
		if n == 5 { // the helper's second model call: after its screenshot
			cs := taskCtrs()
			mu.Lock()
			during = cs
			mu.Unlock()
		}
		model.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if _, err := b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "scripted", AllowPrivate: &allowLoopback}); err != nil {
		t.Fatal(err)
	}

	// Turn 1: the agent writes a file into its persistent workspace (its own desktop starts).
	model.push(
		callStep("p1", "computer_write_file", map[string]any{"path": "keep.txt", "content": "persistent work"}),
		textStep("saved"),
	)
	evs := turn(t, b, admin.ID, ag.ID, "s1", "save a file")
	if res := results(evs); res["p1"][0] != agent.StateSuccess {
		t.Fatalf("write in the persistent workspace: %+v", res["p1"])
	}
	if inst, err = instanceOf(b, admin.ID, ag.ID); err != nil {
		t.Fatal(err)
	}

	// Turn 2: the agent hands a task to a helper, which takes a screenshot, writes a file in
	// its task desktop, reads it back with the shell and looks at its workspace; it also tries
	// a host tool, which it does not have.
	model.push(
		callStep("m1", agent.HelperTool, map[string]any{"name": "researcher", "task": "write a scratch file"}),
		callStep("h1", "computer_screenshot", map[string]any{}),
		callStep("h2", "computer_write_file", map[string]any{"path": "scratch.txt", "content": "helper only"}),
		callStep("h3", "computer_shell", map[string]any{"command": "cat scratch.txt; echo; ls /home/cua/workspace"}),
		callStep("h4", "host_shell", map[string]any{"command": "echo from-host"}),
		textStep("scratch file written"),
		textStep("the helper is done"),
	)
	evs = turn(t, b, admin.ID, ag.ID, "s1", "delegate")
	res := results(evs)
	for _, id := range []string{"h1", "h2", "h3"} {
		if res[id][0] != agent.StateSuccess {
			t.Fatalf("helper call %s: %+v", id, res[id])
		}
	}
	if out := res["h3"][1]; !strings.Contains(out, "helper only") || strings.Contains(out, "keep.txt") {
		t.Fatalf("the helper's workspace is not its own: %q", out)
	}
	if res["h4"][0] != agent.StateDenied {
		t.Fatalf("host tool in a helper: %+v", res["h4"])
	}
	if res["m1"][0] != agent.StateSuccess || res["m1"][1] != "scratch file written" {
		t.Fatalf("task_helper result: %+v", res["m1"])
	}
	var exposed *agent.Event
	shots := 0
	for i, e := range evs {
		switch {
		case e.Type == agent.SubagentExposed:
			exposed = &evs[i]
		case e.ToolCallID == "h1" || e.ToolCallID == "h2" || e.ToolCallID == "h3" || e.ToolCallID == "h4":
			if e.Source != "main/researcher" {
				t.Fatalf("helper event without its source: %+v", e)
			}
			if e.Type == agent.ToolResultDataDelta && e.Data != nil && e.Data.Type == "image" && len(e.Data.Data) > 1000 {
				shots++
			}
		case e.ToolCallID == "m1" && e.Source != "":
			t.Fatalf("the parent's call carries a source: %+v", e)
		}
	}
	if exposed == nil || exposed.Source != "main/researcher" || exposed.Name != "researcher" || shots != 1 {
		t.Fatalf("exposed %+v, screenshots %d", exposed, shots)
	}
	// While the helper worked, exactly one task desktop of this agent ran — not the agent's
	// own container; afterwards it is gone, with its run directory and record.
	mu.Lock()
	seen := during
	mu.Unlock()
	if len(seen) != 1 || !seen[0].Running || seen[0].Name == inst.ContainerName || seen[0].Labels[vm.LabelSession] != "s1" {
		t.Fatalf("task desktops during the task: %+v", seen)
	}
	if left := taskCtrs(); len(left) != 0 {
		t.Fatalf("task desktop left after the task: %+v", left)
	}
	taskInstance := seen[0].Labels[engine.LabelInstance]
	if _, err := os.Stat(filepath.Join(dir, "data", "run", taskInstance)); !os.IsNotExist(err) {
		t.Fatalf("task run directory left: %v", err)
	}
	if _, err := b.Store.VMInstance(taskInstance); err == nil {
		t.Fatal("task desktop record left")
	}
	// The calls the helper ran are in the execution history with their source.
	runs, err := b.Store.ToolRuns(admin.ID, "s1")
	if err != nil {
		t.Fatal(err)
	}
	helperRuns := 0
	for _, r := range runs {
		if r.Source == "main/researcher" {
			helperRuns++
		}
	}
	if helperRuns != 3 { // the screenshot, the write and the shell (a refused call never runs)
		t.Fatalf("%d helper runs in the history (of %d)", helperRuns, len(runs))
	}

	// Turn 3: the persistent workspace kept its file and never saw the helper's.
	model.push(
		callStep("p2", "computer_shell", map[string]any{"command": "cat keep.txt; echo; test -e scratch.txt && echo LEAKED || echo clean"}),
		textStep("checked"),
	)
	evs = turn(t, b, admin.ID, ag.ID, "s1", "check")
	if out := results(evs)["p2"][1]; !strings.Contains(out, "persistent work") || !strings.Contains(out, "clean") {
		t.Fatalf("persistent workspace after the helper: %q", out)
	}
	if cur, err := instanceOf(b, admin.ID, ag.ID); err != nil || cur.ContainerID != inst.ContainerID {
		t.Fatalf("the agent's desktop changed: %+v %v", cur, err)
	}

	// Turn 4: with one desktop allowed and the agent's running, a helper gets no desktop and
	// says why.
	if _, err := b.VMs.SetPolicy(ctx, vm.IsolationPerAgent, 1); err != nil {
		t.Fatal(err)
	}
	model.push(
		callStep("m2", agent.HelperTool, map[string]any{"name": "second", "task": "take a screenshot"}),
		callStep("k1", "computer_screenshot", map[string]any{}),
		textStep("no desktop for me"),
		textStep("ok"),
	)
	evs = turn(t, b, admin.ID, ag.ID, "s1", "delegate again")
	res = results(evs)
	if res["k1"][0] != agent.StateError || !strings.Contains(res["k1"][1], "no desktop free for the helper's task: 1 of 1 running") {
		t.Fatalf("capacity refusal: %+v", res["k1"])
	}
	if res["m2"][0] != agent.StateSuccess || res["m2"][1] != "no desktop for me" {
		t.Fatalf("task_helper result: %+v", res["m2"])
	}
	if left := taskCtrs(); len(left) != 0 {
		t.Fatalf("task desktop created over capacity: %+v", left)
	}
}
