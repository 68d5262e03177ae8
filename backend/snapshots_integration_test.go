package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/api"
	"cubicle/backend/auth"
	"cubicle/backend/snapshot"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// workspaceHash is the SHA-256 of agentID's workspace volume as a snapshot computes it, read
// from the engine's volume directory.
func (e *realEnv) workspaceHash(agentID string) string {
	e.t.Helper()
	var h string
	err := e.b.VMs.WithWorkspace(e.t.Context(), e.account, agentID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
		var err error
		h, err = snapshot.TreeSHA256(ctx, ws.Dir, ws.IDBase)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

func (e *realEnv) snapshots(agentID string) []snapshot.Snapshot {
	e.t.Helper()
	var out struct{ Snapshots []snapshot.Snapshot }
	json.Unmarshal([]byte(e.must("GET", "/api/app/agents/"+agentID+"/snapshots", "", 200)), &out)
	return out.Snapshots
}

// turnSnapshot finds the snapshot taken at the end of the turn whose reply is replyID.
func turnSnapshot(t *testing.T, list []snapshot.Snapshot, replyID string) snapshot.Snapshot {
	t.Helper()
	i := slices.IndexFunc(list, func(s snapshot.Snapshot) bool { return s.ReplyID == replyID })
	if i < 0 {
		t.Fatalf("no snapshot for reply %s in %+v", replyID, list)
	}
	return list[i]
}

func replyOf(evs []agent.Event) string {
	for _, e := range evs {
		if e.ReplyID != "" {
			return e.ReplyID
		}
	}
	return ""
}

// TestWorkspaceSnapshotsOnRealDesktop (issue 25 item 6) on the real engine and the standard
// desktop: a turn builds a project, the next wrecks it (deletes, edits, adds), the chat's undo
// (restore the wrecked turn's "before") brings back a byte-identical tree — hash compare over
// the volume, permissions, symlinks and empty directories included — with the desktop stopped
// around it and running again after; a fork starts from the snapshot; a damaged chunk is
// reported and changes nothing; bad ids, another account and a desktop in use are refused.
func TestWorkspaceSnapshotsOnRealDesktop(t *testing.T) {
	e := newRealEnv(t)
	me := e.account
	ada := e.agent("Ada")
	e.create(ada)

	build := turn(t, e.b, me, ada, "snap-1", "/shell cd ~/workspace && mkdir -p src empty/deep && printf 'hello\\n' > src/a.txt && "+
		"head -c 3000000 /dev/urandom > src/blob && printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod 750 run.sh && "+
		"ln -s src/a.txt link && ln -s /nowhere dangling && chmod 444 src/a.txt && echo built")
	if r := results(build); !strings.Contains(fmt.Sprint(r), "built") {
		t.Fatalf("build turn: %v", r)
	}
	built := turnSnapshot(t, e.snapshots(ada), replyOf(build))
	if built.Before == "" || built.Kind != snapshot.KindTurn || built.Files < 3 {
		t.Fatalf("the build turn's snapshot: %+v", built)
	}
	builtHash := e.workspaceHash(ada)
	if built.TreeSHA256 != builtHash {
		t.Fatalf("snapshot tree %s, workspace %s", built.TreeSHA256, builtHash)
	}
	// The execution history has the tree's hash next to the tool calls.
	runs, err := e.b.Store.ToolRuns(me, "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(runs, func(r store.ToolRun) bool { return r.Tool == "workspace.snapshot" }); i < 0 ||
		runs[i].OutputSHA256 == nil || *runs[i].OutputSHA256 != builtHash {
		t.Fatalf("history: %+v", runs)
	}
	// A turn that changes nothing takes no snapshot.
	n := len(e.snapshots(ada))
	turn(t, e.b, me, ada, "snap-1", "/shell ls ~/workspace")
	if got := len(e.snapshots(ada)); got != n {
		t.Fatalf("a read-only turn took a snapshot: %d → %d", n, got)
	}

	wreck := turn(t, e.b, me, ada, "snap-1", "/shell cd ~/workspace && rm -rf src empty dangling && echo changed > run.sh && "+
		"echo new > new.txt && echo wrecked")
	if r := results(wreck); !strings.Contains(fmt.Sprint(r), "wrecked") {
		t.Fatalf("wreck turn: %v", r)
	}
	wrecked := turnSnapshot(t, e.snapshots(ada), replyOf(wreck))
	if wrecked.Before != built.ID {
		t.Fatalf("the wreck's before is %s, want the build's snapshot %s", wrecked.Before, built.ID)
	}
	var d snapshot.Diff
	json.Unmarshal([]byte(e.must("GET", "/api/app/agents/"+ada+"/snapshots/"+wrecked.Before+"/diff", "", 200)), &d)
	if !slices.Contains(d.Added, "src/blob") || !slices.Contains(d.Added, "empty/deep") || !slices.Contains(d.Removed, "new.txt") ||
		!slices.Contains(d.Changed, "run.sh") {
		t.Fatalf("preview: %+v", d)
	}

	// A desktop in use is not restored under its user.
	desk, _ := e.b.VMs.Agent(t.Context(), me, ada)
	e.b.VMs.MarkBusy(desk.Desktop.ID, "a test's task")
	if code, body := e.call("POST", "/api/app/agents/"+ada+"/snapshots/"+wrecked.Before+"/restore", ""); code != 409 || !strings.Contains(body, "in use") {
		t.Fatalf("restore while in use: %d %s", code, body)
	}
	e.b.VMs.MarkIdle(desk.Desktop.ID)

	// Undo: the running desktop is stopped around the restore and runs again after.
	var res api.RestoreResult
	json.Unmarshal([]byte(e.must("POST", "/api/app/agents/"+ada+"/snapshots/"+wrecked.Before+"/restore", "", 200)), &res)
	if res.Previous != wrecked.ID {
		t.Fatalf("the workspace before the restore was the wreck's snapshot %s; restore says %q", wrecked.ID, res.Previous)
	}
	if h := e.workspaceHash(ada); h != builtHash {
		t.Fatalf("restored workspace %s, want %s", h, builtHash)
	}
	if v, _ := e.b.VMs.Agent(t.Context(), me, ada); v.Desktop.State != vm.StateRunning {
		t.Fatalf("desktop after the restore: %s", v.Desktop.State)
	}
	check := turn(t, e.b, me, ada, "snap-1", "/shell cd ~/workspace && cat src/a.txt && stat -c '%a %n' run.sh src/a.txt && readlink link dangling && ls -d empty/deep")
	out := fmt.Sprint(results(check))
	for _, want := range []string{"hello", "750 run.sh", "444 src/a.txt", "/nowhere", "empty/deep"} {
		if !strings.Contains(out, want) {
			t.Fatalf("in the desktop after the restore, %q is missing: %s", want, out)
		}
	}

	// Fork: a new agent whose workspace starts as the build's snapshot.
	var fork struct{ ID string }
	json.Unmarshal([]byte(e.must("POST", "/api/app/agents", `{"name":"Ada's variant","from":{"agentId":"`+ada+`","snapshotId":"`+built.ID+`"}}`, 201)), &fork)
	if h := e.workspaceHash(fork.ID); h != builtHash {
		t.Fatalf("fork's workspace %s, want %s", h, builtHash)
	}
	if fs := e.snapshots(fork.ID); len(fs) != 1 || fs[0].Kind != snapshot.KindFork || fs[0].TreeSHA256 != builtHash {
		t.Fatalf("fork's snapshots: %+v", fs)
	}
	e.create(fork.ID)
	if out := fmt.Sprint(results(turn(t, e.b, me, fork.ID, "snap-2", "/shell cat ~/workspace/src/a.txt; stat -c %a ~/workspace/run.sh"))); !strings.Contains(out, "hello") || !strings.Contains(out, "750") {
		t.Fatalf("fork's desktop: %s", out)
	}
	// A fork from a snapshot that is not there makes no agent.
	before := len(mustAgents(e))
	e.must("POST", "/api/app/agents", `{"name":"X","from":{"agentId":"`+ada+`","snapshotId":"nope"}}`, 404)
	if after := len(mustAgents(e)); after != before {
		t.Fatalf("a failed fork left an agent: %d → %d", before, after)
	}

	// A damaged chunk: reported, nothing restored.
	m, err := e.b.snaps.Store().Manifest(ada, wrecked.ID)
	if err != nil {
		t.Fatal(err)
	}
	var chunk string
	for _, en := range m.Entries {
		if len(en.Chunks) > 0 {
			chunk = en.Chunks[0]
		}
	}
	p := filepath.Join(e.b.cfg.DataDir, "snapshots", "chunks", chunk[:2], chunk)
	raw, _ := os.ReadFile(p)
	raw[len(raw)/2] ^= 0x55
	os.WriteFile(p, raw, 0o600)
	now := e.workspaceHash(ada)
	if code, body := e.call("POST", "/api/app/agents/"+ada+"/snapshots/"+wrecked.ID+"/restore", ""); code != 409 || !strings.Contains(body, "damaged") {
		t.Fatalf("restore of a damaged snapshot: %d %s", code, body)
	}
	if h := e.workspaceHash(ada); h != now {
		t.Fatal("a failed restore changed the workspace")
	}

	// Bad ids and another account.
	e.must("GET", "/api/app/agents/no-such-agent/snapshots", "", 404)
	e.must("GET", "/api/app/agents/"+ada+"/snapshots/no-such/diff", "", 404)
	e.must("POST", "/api/app/agents/"+ada+"/snapshots/..%2F..%2Fx/restore", "", 404)
	e.must("DELETE", "/api/app/agents/"+ada+"/snapshots/no-such", "", 404)
	e.must("POST", "/api/app/agents/"+ada+"/snapshots", `{"name":"bad\u0001name"}`, 400)
	e.must("PUT", "/api/app/agents/"+ada+"/snapshots/policy", `{"keepCount":-1}`, 400)
	admin, err := e.b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ap, err := e.b.Auth.Issue(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Auth.CreateAccount(ap, auth.NewAccount{Username: "stranger", Password: "Outsider-long-pass-1234"}); err != nil {
		t.Fatal(err)
	}
	sp, err := e.b.Auth.Login("stranger", "Outsider-long-pass-1234", "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/app/agents/" + ada + "/snapshots", ""},
		{"POST", "/api/app/agents/" + ada + "/snapshots", `{"name":"mine now"}`},
		{"GET", "/api/app/agents/" + ada + "/snapshots/" + built.ID + "/diff", ""},
		{"POST", "/api/app/agents/" + ada + "/snapshots/" + built.ID + "/restore", ""},
		{"DELETE", "/api/app/agents/" + ada + "/snapshots/" + built.ID, ""},
		{"POST", "/api/app/agents", `{"name":"theft","from":{"agentId":"` + ada + `","snapshotId":"` + built.ID + `"}}`},
	} {
		if code, body := callAs(t, e.ts.URL, sp.Token, c.method, c.path, c.body); code != 404 {
			t.Errorf("stranger %s %s: %d %s", c.method, c.path, code, body)
		}
	}
	if _, err := e.b.snaps.Store().Get(ada, built.ID); err != nil {
		t.Fatalf("the stranger's delete removed the snapshot: %v", err)
	}
	// Delete works for the owner; the snapshot is gone.
	e.must("DELETE", "/api/app/agents/"+ada+"/snapshots/"+built.ID, "", 204)
	e.must("GET", "/api/app/agents/"+ada+"/snapshots/"+built.ID+"/diff", "", 404)
}

func mustAgents(e *realEnv) []json.RawMessage {
	var out struct{ Agents []json.RawMessage }
	json.Unmarshal([]byte(e.must("GET", "/api/app/agents", "", 200)), &out)
	return out.Agents
}

func callAs(t *testing.T, base, token, method, path, body string) (int, string) {
	t.Helper()
	r, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+token)
	if method != "GET" {
		r.Header.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(r.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}
