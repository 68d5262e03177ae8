package fleet

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"cubicle/backend/control"
	"cubicle/backend/fault"
	"cubicle/backend/hostaccess"
	"cubicle/backend/hostdesk"
	"cubicle/backend/nodes"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// testFleet is a Fleet over real parts and no engine: a bbolt store in a temporary directory,
// the runners' hub (runners registered, none connected), the control leases, the host access
// checker and a VM manager that has no engine (what `--engine none` gives).
type testFleet struct {
	*Fleet
	st  *store.Store
	hub *nodes.Hub
	ha  *hostaccess.Checker
}

func newTestFleet(t *testing.T) testFleet {
	t.Helper()
	log := testenv.Logger(t, slog.LevelInfo)
	st, err := store.Open(filepath.Join(t.TempDir(), "cubicle.db"), store.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	hub, err := nodes.New(nodes.Config{Store: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hub.Close() })
	vms, err := vm.New(vm.Config{Store: st, DataDir: t.TempDir(), EngineProblem: "no container engine (this test has none)", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vms.Close() })
	ctl := control.New(control.Config{Logger: log})
	t.Cleanup(func() { ctl.Close() })
	hd := hostdesk.New(log)
	t.Cleanup(func() { hd.Close() })
	ha := hostaccess.New(st)
	f, err := New(Config{Store: st, Runners: hub, Local: vms, Control: ctl, HostAccess: ha, HostScreen: hd, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return testFleet{Fleet: f, st: st, hub: hub, ha: ha}
}

func (tf testFleet) account(t *testing.T, id string, role store.Role) {
	t.Helper()
	if err := tf.st.CreateAccount(store.Account{ID: id, Username: id, Role: role}); err != nil {
		t.Fatal(err)
	}
}

func (tf testFleet) agent(t *testing.T, a store.Agent) {
	t.Helper()
	if err := tf.st.CreateAgent(a); err != nil {
		t.Fatal(err)
	}
}

func (tf testFleet) runner(t *testing.T, name string, cloud bool) string {
	t.Helper()
	c, err := tf.hub.Create(name, cloud, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// TestPlaceRefusals: a placement that cannot be made says why in its error class and
// message, and moves nothing; one that can moves the agent and only it.
func TestPlaceRefusals(t *testing.T) {
	tf := newTestFleet(t)
	tf.account(t, "acc-member", store.RoleMember)
	tf.account(t, "acc-other", store.RoleMember)
	tf.account(t, "acc-admin", store.RoleAdmin)
	tf.agent(t, store.Agent{ID: "ag-member", AccountID: "acc-member", Name: "Ada"})
	tf.agent(t, store.Agent{ID: "ag-admin", AccountID: "acc-admin", Name: "Bea"})
	box := tf.runner(t, "box", false)
	gone := tf.runner(t, "gone", false)
	if err := tf.hub.Revoke(gone); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, account, agent, node string
		class                      error
		says                       string
	}{
		{"unknown agent", "acc-member", "ag-nope", "local", fault.ErrNotFound, `agent "ag-nope" not found`},
		{"another account's agent", "acc-other", "ag-member", "local", fault.ErrNotFound, `agent "ag-member" not found`},
		{"no node", "acc-member", "ag-member", "", fault.ErrInvalid, `"nodeId": "local"`},
		{"unknown runner", "acc-member", "ag-member", "r-nope", fault.ErrNotFound, "Settings → Runners"},
		{"revoked runner", "acc-admin", "ag-admin", gone, fault.ErrConflict, "was revoked"},
		{"runner without a grant", "acc-member", "ag-member", box, fault.ErrForbidden, "administrator's grant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tf.Place(t.Context(), tc.account, tc.agent, tc.node)
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Place(%s, %s, %q): %v; want %v saying %q", tc.account, tc.agent, tc.node, err, tc.class, tc.says)
			}
			for _, id := range []string{"ag-member", "ag-admin"} {
				if a, err := tf.st.Agent(id); err != nil || a.NodeID != "" {
					t.Fatalf("a refused placement moved %s: %+v %v", id, a, err)
				}
			}
		})
	}

	// Granted, the member's agent moves to the runner; the administrator's stays.
	if err := tf.ha.Grant("acc-admin", "acc-member", box, hostaccess.Access{Placement: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := tf.Place(t.Context(), "acc-member", "ag-member", box); err != nil || got != box {
		t.Fatalf("granted placement: %q %v", got, err)
	}
	if a, _ := tf.st.Agent("ag-member"); a.NodeID != box || NodeOf(a) != box {
		t.Fatalf("placed agent's node %q (NodeOf %q), want %s", a.NodeID, NodeOf(a), box)
	}
	if a, _ := tf.st.Agent("ag-admin"); a.NodeID != "" {
		t.Fatalf("another agent moved: %+v", a)
	}
	// Its calls now go to the runner (not connected: its client says so when asked).
	if n, err := tf.AgentNode("ag-member"); err != nil || n.NodeID() != box {
		t.Fatalf("the placed agent's node: %v %v", n, err)
	}
	// Back on the server's own node: stored as "".
	if got, err := tf.Place(t.Context(), "acc-member", "ag-member", "local"); err != nil || got != nodes.LocalID {
		t.Fatalf("placing back on local: %q %v", got, err)
	}
	if a, _ := tf.st.Agent("ag-member"); a.NodeID != "" || NodeOf(a) != nodes.LocalID {
		t.Fatalf("agent placed back on local is stored on %q", a.NodeID)
	}
}

// TestCloudNodeWithoutCloudRunners: a cloud computer with no connected cloud runner is
// refused as unavailable, saying what an administrator does; a runner marked cloud that is
// not connected does not count, except the one the agent is placed on (fail closed there).
func TestCloudNodeWithoutCloudRunners(t *testing.T) {
	tf := newTestFleet(t)
	tf.account(t, "acc", store.RoleAdmin)
	cloud := tf.runner(t, "cloud box", true)
	tf.agent(t, store.Agent{ID: "ag-cloud", AccountID: "acc", Name: "Cy", Computer: "cloud"})
	tf.agent(t, store.Agent{ID: "ag-on-cloud", AccountID: "acc", Name: "Di", Computer: "cloud", NodeID: cloud})

	a, _ := tf.st.Agent("ag-cloud")
	if _, err := tf.CloudNode(a); !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "Settings → Runners") {
		t.Fatalf("cloud node with no connected cloud runner: %v", err)
	}
	if _, err := tf.NodeFor(a); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("the cloud agent's node: %v", err)
	}
	on, _ := tf.st.Agent("ag-on-cloud")
	if got, err := tf.CloudNode(on); err != nil || got != cloud {
		t.Fatalf("an agent placed on a cloud runner keeps it (connected or not): %q %v", got, err)
	}
}

// TestLabelAndStatsNodes: nodes are named for people; with no runner connected the sampler
// asks node "local" only, through the manager itself.
func TestLabelAndStatsNodes(t *testing.T) {
	tf := newTestFleet(t)
	box := tf.runner(t, "mac-mini", false)
	for node, want := range map[string]string{
		"":      "this server's machine (node local)",
		"local": "this server's machine (node local)",
		box:     `"mac-mini"`,
		"r-x":   "runner r-x",
	} {
		if got := tf.Label(node); !strings.Contains(got, want) {
			t.Errorf("Label(%q) = %q, want it to contain %q", node, got, want)
		}
	}
	ns := tf.StatsNodes()
	if len(ns) != 1 || ns[0].NodeID() != nodes.LocalID {
		t.Fatalf("stats nodes %v, want node local only", ns)
	}
	if _, ok := ns[0].(*vm.Manager); !ok {
		t.Fatalf("node local is sampled through %T, want the manager", ns[0])
	}
}
