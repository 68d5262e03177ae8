package backend

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/auth"
	"cubicle/backend/guest"
	"cubicle/backend/mcpclient"
	"cubicle/backend/models"
	"cubicle/backend/store"
)

// referenceServers is where tests/mcp-desktop's node_modules (the npm reference MCP servers,
// pinned there and installed on the host by scripts/lib.sh) is unpacked inside the desktop.
const referenceServers = "/tmp/mcp-desktop"

// TestMCPClientReferenceServersOnRealDesktop runs the npm reference MCP servers
// @modelcontextprotocol/server-everything and server-filesystem as stdio servers inside an
// agent's real desktop (Podman, the standard image), on the image's own Node, through real
// chat turns with the scripted model: the image has node, npm, npx and python3; the servers'
// tools are offered as mcp_<server>_<tool> (a denied one is not); everything's echo answers
// and its tiny image reaches the model's next request; a policy deny on get-env is refused
// with the policy's reason and the server's secret never reaches the model; filesystem reads a
// file the agent wrote with computer_shell, and its write_file (the policy asks) writes a file
// that is really in the workspace, owned by the desktop's user. The servers are copied in
// from the host (a tar through the driver): the desktop never reaches the npm registry.
func TestMCPClientReferenceServersOnRealDesktop(t *testing.T) {
	began := time.Now()
	mods := filepath.Join("..", "tests", "mcp-desktop", "node_modules")
	everythingJS := "@modelcontextprotocol/server-everything/dist/index.js"
	filesystemJS := "@modelcontextprotocol/server-filesystem/dist/index.js"
	for _, js := range []string{everythingJS, filesystemJS} {
		if _, err := os.Stat(filepath.Join(mods, filepath.FromSlash(js))); err != nil {
			t.Fatalf("the reference MCP servers are not installed: run `npm ci` in tests/mcp-desktop (%v)", err)
		}
	}
	tinyImage := everythingTinyImage(t, mods)
	tgz := tarGz(t, mods)

	b, _, ctx := startOnRealDesktop(t, slog.LevelWarn)
	adminAcc, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	admin := auth.Principal{AccountID: adminAcc.ID, Username: adminAcc.Username, Role: adminAcc.Role}
	ada, err := b.Profiles.Create(admin.AccountID, "Ada")
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

	// The first turn starts the desktop: Node with npm and npx, and Python 3, are in the image.
	model.push(
		callStep("v", "computer_shell", map[string]any{"command": "node --version && npm --version && npx --version && python3 --version && " +
			"echo written-by-the-agent > /home/cua/workspace/given.txt"}),
		textStep("ok"),
	)
	res := results(turn(t, b, admin.AccountID, ada.ID, "s1", "what is installed?"))
	if v := res["v"]; v[0] != agent.StateSuccess || !regexp.MustCompile(`(?m)^v18\.\d+\.\d+\n10\.9\.9\n10\.9\.9\nPython 3\.\d+`).MatchString(v[1]) {
		t.Fatalf("node, npm, npx and python3 in the standard image: %+v", v)
	}
	started := time.Now()

	// The servers come from the host: a tar through the driver, unpacked as the desktop's user.
	inst, err := instanceOf(b, admin.AccountID, ada.ID)
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.VMs.Link(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WriteFile(ctx, referenceServers+".tgz", tgz, 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := g.Exec(ctx, guest.ExecRequest{Shell: "mkdir -p " + referenceServers + " && tar -xzf " + referenceServers + ".tgz -C " +
		referenceServers + " && rm " + referenceServers + ".tgz", Timeout: 2 * time.Minute}); err != nil || r.ExitCode != 0 {
		t.Fatalf("unpack the servers in the desktop: %+v %v", r, err)
	}
	copied := time.Now()

	node, stdio := "node", mcpclient.TransportStdio
	create := func(name string, args []string, env map[string]*string, pol store.MCPPolicy) string {
		t.Helper()
		srv, err := b.MCPClient.Create(admin, mcpclient.Input{Name: &name, Transport: &stdio, Command: &node, Args: args, Env: env, Policy: &pol})
		if err != nil {
			t.Fatalf("add MCP server %s: %v", name, err)
		}
		return srv.ID
	}
	secret := "everything-env-secret-7d1f"
	everything := create("everything", []string{referenceServers + "/node_modules/" + everythingJS, "stdio"},
		map[string]*string{"EVERYTHING_TEST_SECRET": &secret},
		store.MCPPolicy{Default: mcpclient.Allow, Rules: []store.MCPRule{{Tool: "get-env", Subject: "*", Effect: mcpclient.Deny}}})
	filesystem := create("fs", []string{referenceServers + "/node_modules/" + filesystemJS, "/home/cua/workspace"}, nil,
		store.MCPPolicy{Default: mcpclient.Allow, Rules: []store.MCPRule{{Tool: "write_file", Subject: "user:" + admin.Username, Effect: mcpclient.Ask}}})
	if _, err := b.MCPClient.SetAgentServers(admin, ada.ID, []string{everything, filesystem}); err != nil {
		t.Fatal(err)
	}

	n := model.requests()
	model.push(
		callStep("e1", "mcp_everything_echo", map[string]any{"message": "hello from Cubicle"}),
		callStep("e2", "mcp_everything_get-tiny-image", map[string]any{}),
		callStep("e3", "mcp_everything_get-env", map[string]any{}),
		callStep("f1", "mcp_fs_read_text_file", map[string]any{"path": "/home/cua/workspace/given.txt"}),
		callStep("f2", "mcp_fs_write_file", map[string]any{"path": "/home/cua/workspace/from-mcp.txt", "content": "written by server-filesystem\n"}),
	)
	evs := turn(t, b, admin.AccountID, ada.ID, "s1", "use the reference servers")
	listed := time.Now()
	res = results(evs)
	offered := toolsOffered(t, model, n)
	if !hasAll(offered, "mcp_everything_echo", "mcp_everything_get-tiny-image", "mcp_fs_read_text_file", "mcp_fs_write_file", "mcp_fs_list_directory") {
		t.Fatalf("offered %v", offered)
	}
	if hasAll(offered, "mcp_everything_get-env") {
		t.Fatalf("get-env is denied to everyone but was offered: %v", offered)
	}
	t.Logf("offered %d tools of the two servers", len(offered))
	if res["e1"][0] != agent.StateSuccess || res["e1"][1] != "Echo: hello from Cubicle" {
		t.Fatalf("echo: %+v", res["e1"])
	}
	if res["e2"][0] != agent.StateSuccess || !strings.Contains(res["e2"][1], "Here's the image you requested") {
		t.Fatalf("get-tiny-image: %+v", res["e2"])
	}
	if !strings.Contains(model.request(n+2), tinyImage) {
		t.Fatal("the tiny image of server-everything did not reach the model's next request")
	}
	if res["e3"][0] != agent.StateDenied || !strings.Contains(res["e3"][1], `MCP server "everything"`) ||
		!strings.Contains(res["e3"][1], "the rule deny for * on tool get-env") {
		t.Fatalf("get-env, denied by the policy: %+v", res["e3"])
	}
	if res["f1"][0] != agent.StateSuccess || strings.TrimSpace(res["f1"][1]) != "written-by-the-agent" {
		t.Fatalf("read_text_file of the agent's file: %+v", res["f1"])
	}
	var asked []agent.ToolCall
	why := ""
	for _, e := range evs {
		if e.Type == agent.RequireUserConfirm {
			asked, why = e.ToolCalls, e.Reason
		}
	}
	if len(asked) != 1 || asked[0].Name != "mcp_fs_write_file" || !strings.Contains(why, "the rule ask for user:"+admin.Username+" on tool write_file") {
		t.Fatalf("write_file was not asked about with the policy's reason: %+v %q", asked, why)
	}

	// Yes: the file is written, and it is really there, the desktop user's.
	model.push(
		callStep("c1", "computer_shell", map[string]any{"command": "stat -c '%U' /home/cua/workspace/from-mcp.txt; cat /home/cua/workspace/from-mcp.txt; " +
			"ps -o user=,args= -C node"}),
		textStep("done"),
	)
	res = results(turn(t, b, admin.AccountID, ada.ID, "s1", "yes"))
	if res["f2"][0] != agent.StateSuccess || !strings.Contains(res["f2"][1], "Successfully wrote to /home/cua/workspace/from-mcp.txt") {
		t.Fatalf("write_file after yes: %+v", res["f2"])
	}
	out := res["c1"][1]
	if res["c1"][0] != agent.StateSuccess || !strings.Contains(out, "stdout:\ncua\nwritten by server-filesystem\n") {
		t.Fatalf("the written file in the desktop: %+v", res["c1"])
	}
	for _, js := range []string{everythingJS, filesystemJS} {
		if !regexp.MustCompile(`(?m)^cua +node ` + regexp.QuoteMeta(referenceServers+"/node_modules/"+js)).MatchString(out) {
			t.Fatalf("no server process %s of the desktop's user: %q", js, out)
		}
	}
	back, err := g.ReadFile(ctx, "/home/cua/workspace/from-mcp.txt", 1<<10)
	if err != nil || string(back) != "written by server-filesystem\n" {
		t.Fatalf("read back through the driver: %q %v", back, err)
	}
	for i := range model.requests() {
		if strings.Contains(model.request(i), secret) {
			t.Fatalf("the server's environment reached the model (request %d)", i)
		}
	}
	t.Logf("wall time: desktop started and checked %s, servers copied in %s (%d KiB), listed and called %s, whole test %s",
		started.Sub(began).Round(time.Millisecond), copied.Sub(started).Round(time.Millisecond), len(tgz)>>10,
		listed.Sub(copied).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// everythingTinyImage is the base64 PNG server-everything's get-tiny-image returns, read from
// its source.
func everythingTinyImage(t *testing.T, mods string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(mods, "@modelcontextprotocol", "server-everything", "dist", "tools", "get-tiny-image.js"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`MCP_TINY_IMAGE = "([A-Za-z0-9+/=]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no MCP_TINY_IMAGE in server-everything's get-tiny-image.js")
	}
	return string(m[1])
}

// tarGz packs dir (regular files, directories, symbolic links) as a gzipped tar with its
// contents under node_modules/.
func tarGz(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(filepath.Join("node_modules", rel))
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatalf("pack %s: %v", dir, err)
	}
	return buf.Bytes()
}
