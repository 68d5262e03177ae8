// Package storetest is the conformance suite of store.Store: Run checks every method's
// contract (results, error classes, aborted updates, persistence, concurrency, locking and the
// schema guard) against stores made by a caller-supplied function.
package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Run runs the suite. open must return a new, empty, open store for each call, backed by a
// file of its own (t.TempDir()); the suite closes it, reopens its Path with store.Open and may
// rewrite the file with bbolt directly.
func Run(t *testing.T, open func(t *testing.T) *store.Store) {
	t.Run("Accounts", func(t *testing.T) { testAccounts(t, open) })
	t.Run("UpdateAccount", func(t *testing.T) { testUpdateAccount(t, open) })
	t.Run("Agents", func(t *testing.T) { testAgents(t, open) })
	t.Run("UpdateAgent", func(t *testing.T) { testUpdateAgent(t, open) })
	t.Run("DeleteAgent", func(t *testing.T) { testDeleteAgent(t, open) })
	t.Run("NodeSettings", func(t *testing.T) { testNodeSettings(t, open) })
	t.Run("Persistence", func(t *testing.T) { testPersistence(t, open) })
	t.Run("ConcurrentUpdates", func(t *testing.T) { testConcurrentUpdates(t, open) })
	t.Run("LockTimeout", func(t *testing.T) { testLockTimeout(t, open) })
	t.Run("NewerSchemaRefused", func(t *testing.T) { testNewerSchema(t, open) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, open) })
	t.Run("Security", func(t *testing.T) { testSecurity(t, open) })
}

// testSecurity covers accounts and security: deleting an account frees its name and drops its
// host grants; grants, revocations, allow rules, confirmations and the security settings
// persist; the legacy role word "user" reads as member.
func testSecurity(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	for _, a := range []store.Account{
		{ID: "a1", Username: "root", Role: store.RoleAdmin, CreatedAt: at(0)},
		{ID: "a2", Username: "mia", Role: store.RoleMember, CreatedAt: at(1), Disabled: true, SessionGen: 3, PasswordChosen: true},
	} {
		if err := s.CreateAccount(a); err != nil {
			t.Fatal(err)
		}
	}
	wantClass(t, "grant for a missing account", s.PutHostGrant(store.HostGrant{AccountID: "nope", NodeID: "local", HostTools: true}), fault.ErrNotFound)
	wantClass(t, "grant without node", s.PutHostGrant(store.HostGrant{AccountID: "a2", HostTools: true}), fault.ErrInvalid)
	g := store.HostGrant{AccountID: "a2", NodeID: "local", HostTools: true, GrantedBy: "a1", UpdatedAt: at(2)}
	wantClass(t, "grant", s.PutHostGrant(g), nil)
	wantClass(t, "second node", s.PutHostGrant(store.HostGrant{AccountID: "a2", NodeID: "n2", HostDesktop: true, UpdatedAt: at(3)}), nil)
	if none, err := s.HostGrant("a1", "local"); err != nil || none.HostTools || none.HostDesktop {
		t.Fatalf("no grant = %+v, %v", none, err)
	}
	wantClass(t, "revoke", s.RevokeSession("n1", at(60), at(0)), nil)
	wantClass(t, "revoke empty", s.RevokeSession("", at(60), at(0)), fault.ErrInvalid)
	// An expired revocation is dropped by the next one.
	wantClass(t, "revoke old", s.RevokeSession("old", at(1), at(0)), nil)
	wantClass(t, "revoke later", s.RevokeSession("n2", at(90), at(5)), nil)
	rule := store.AllowRule{ID: "r1", AgentID: "g1", Tool: "computer_shell", Command: "make", CreatedBy: "a2", CreatedAt: at(4)}
	wantClass(t, "rule", s.AddAllowRule(rule), nil)
	wantClass(t, "rule for all", s.AddAllowRule(store.AllowRule{ID: "r2", Tool: "*", CreatedAt: at(5)}), nil)
	wantClass(t, "rule without tool", s.AddAllowRule(store.AllowRule{ID: "r3"}), fault.ErrInvalid)
	c := store.Confirmation{ID: "c1", At: at(6), AccountID: "a2", Tool: "computer_shell", Summary: "rm -rf build", Confirmed: true, Rules: []string{"exact"}}
	wantClass(t, "confirmation", s.PutConfirmation(c), nil)
	wantClass(t, "confirmation 2", s.PutConfirmation(store.Confirmation{ID: "c2", At: at(7), AccountID: "a1", Tool: "host_shell"}), nil)
	set := store.SecuritySettings{GuardLevel: "SMART", DeniedTools: []string{"host_*"}, ModelEndpoints: []store.ModelEndpoint{{BaseURL: "https://x/v1", AllowPrivate: true}},
		DesktopHostPorts: []int{8080}, UpdatedAt: at(8), UpdatedBy: "a1"}
	wantClass(t, "security settings", s.PutSecuritySettings(set), nil)

	s = reopen(t, s)
	if a, _ := s.Account("a2"); !a.Disabled || a.SessionGen != 3 || !a.PasswordChosen || a.Role != store.RoleMember {
		t.Fatalf("account after reopen %+v", a)
	}
	got, err := s.HostGrant("a2", "local")
	wantClass(t, "grant after reopen", err, nil)
	equal(t, "grant", got, g)
	if gs, _ := s.HostGrants("a2"); len(gs) != 2 {
		t.Fatalf("grants %+v", gs)
	}
	for nonce, want := range map[string]bool{"n1": true, "n2": true, "old": false, "never": false} {
		if got, err := s.SessionRevoked(nonce); err != nil || got != want {
			t.Fatalf("SessionRevoked(%s) = %v, %v; want %v", nonce, got, err, want)
		}
	}
	if rs, _ := s.AllowRules("g1"); len(rs) != 1 || rs[0] != rule {
		t.Fatalf("agent rules %+v", rs)
	}
	if rs, _ := s.AllowRules(""); len(rs) != 1 || rs[0].ID != "r2" {
		t.Fatalf("rules for all %+v", rs)
	}
	if rs, _ := s.AllAllowRules(); len(rs) != 2 {
		t.Fatalf("all rules %+v", rs)
	}
	wantClass(t, "delete a missing rule", s.DeleteAllowRule("g1", "r2"), fault.ErrNotFound)
	wantClass(t, "delete the agent's rules", s.DeleteAllowRulesOf("g1"), nil)
	if rs, _ := s.AllAllowRules(); len(rs) != 1 {
		t.Fatalf("rules after deleting g1's %+v", rs)
	}
	cs, err := s.Confirmations(0, nil)
	if err != nil || len(cs) != 2 || cs[0].ID != "c2" {
		t.Fatalf("confirmations newest first: %+v, %v", cs, err)
	}
	cs, _ = s.Confirmations(5, func(c store.Confirmation) bool { return c.AccountID == "a2" })
	if len(cs) != 1 || cs[0].Summary != "rm -rf build" || !cs[0].Confirmed {
		t.Fatalf("filtered confirmations %+v", cs)
	}
	gotSet, err := s.SecuritySettings()
	wantClass(t, "security settings after reopen", err, nil)
	equal(t, "security settings", gotSet, set)
	// Deleting an account frees its name and removes its grants.
	wantClass(t, "delete account", s.DeleteAccount("a2"), nil)
	wantClass(t, "delete twice", s.DeleteAccount("a2"), fault.ErrNotFound)
	if gs, _ := s.HostGrants("a2"); len(gs) != 0 {
		t.Fatalf("grants of a deleted account %+v", gs)
	}
	wantClass(t, "reuse the name", s.CreateAccount(store.Account{ID: "a3", Username: "MIA"}), nil)
}

var (
	t0        = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	errReject = errors.New("rejected by the caller")
)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

// wantClass fails unless err wraps class (nil: unless err is nil).
func wantClass(t *testing.T, what string, err, class error) {
	t.Helper()
	if class == nil {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", what, err)
		}
		return
	}
	if !errors.Is(err, class) {
		t.Fatalf("%s: error %v, want class %v", what, err, class)
	}
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

func ids[T any](xs []T, id func(T) string) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, id(x))
	}
	return out
}

func accountID(a store.Account) string { return a.ID }
func agentID(a store.Agent) string     { return a.ID }

func testAccounts(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	admin := store.Account{ID: "a1", Username: "Admin", PasswordHash: "h1", Role: store.RoleAdmin, CreatedAt: at(2)}
	creates := []struct {
		name  string
		a     store.Account
		class error
	}{
		{"admin", admin, nil},
		{"user created earlier", store.Account{ID: "a3", Username: "bob", Role: store.RoleMember, CreatedAt: at(1)}, nil},
		{"same time as admin, smaller id", store.Account{ID: "a0", Username: "carol", Role: store.RoleMember, CreatedAt: at(2)}, nil},
		{"duplicate id", store.Account{ID: "a1", Username: "other", CreatedAt: at(3)}, fault.ErrExists},
		{"username taken, other case", store.Account{ID: "a9", Username: "ADMIN", CreatedAt: at(3)}, fault.ErrExists},
		{"mixed-case name", store.Account{ID: "a4", Username: "Kim", Role: store.RoleMember, CreatedAt: at(4)}, nil},
		{"username taken, unicode fold", store.Account{ID: "a9", Username: "\u212aIM", CreatedAt: at(3)}, fault.ErrExists}, // Kelvin sign
		{"empty id", store.Account{Username: "dave"}, fault.ErrInvalid},
		{"empty username", store.Account{ID: "a8"}, fault.ErrInvalid},
		{"blank username", store.Account{ID: "a8", Username: "  "}, fault.ErrInvalid},
	}
	for _, tc := range creates {
		t.Run("create/"+tc.name, func(t *testing.T) {
			wantClass(t, "CreateAccount", s.CreateAccount(tc.a), tc.class)
		})
	}

	got, err := s.Account("a1")
	wantClass(t, "Account", err, nil)
	equal(t, "Account(a1)", got, admin)

	lookups := []struct {
		name, username, wantID string
		class                  error
	}{
		{"exact", "Admin", "a1", nil},
		{"lower", "admin", "a1", nil},
		{"upper", "ADMIN", "a1", nil},
		{"other account", "Bob", "a3", nil},
		{"unicode fold", "\u212aim", "a4", nil},
		{"miss", "nobody", "", fault.ErrNotFound},
		{"empty", "", "", fault.ErrNotFound},
	}
	for _, tc := range lookups {
		t.Run("by username/"+tc.name, func(t *testing.T) {
			a, err := s.AccountByUsername(tc.username)
			wantClass(t, "AccountByUsername", err, tc.class)
			if a.ID != tc.wantID {
				t.Fatalf("AccountByUsername(%q).ID = %q, want %q", tc.username, a.ID, tc.wantID)
			}
		})
	}

	_, err = s.Account("ghost")
	wantClass(t, "Account(ghost)", err, fault.ErrNotFound)
	if !strings.Contains(err.Error(), `account "ghost" not found`) {
		t.Fatalf("miss message %q does not name the account", err)
	}

	list, err := s.Accounts()
	wantClass(t, "Accounts", err, nil)
	equal(t, "Accounts order", ids(list, accountID), []string{"a3", "a0", "a1", "a4"})
	equal(t, "Accounts[2]", list[2], admin)
}

func testUpdateAccount(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	for _, a := range []store.Account{
		{ID: "a1", Username: "alice", Role: store.RoleMember, CreatedAt: at(0)},
		{ID: "a2", Username: "bob", Role: store.RoleMember, CreatedAt: at(1)},
	} {
		if err := s.CreateAccount(a); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		id    string
		fn    func(*store.Account) error
		class error // nil: success
		same  bool  // the fn error itself must come back
	}{
		{"promote", "a1", func(a *store.Account) error { a.Role = store.RoleAdmin; return nil }, nil, false},
		{"new password", "a1", func(a *store.Account) error { a.PasswordHash = "h2"; return nil }, nil, false},
		{"recase own name", "a1", func(a *store.Account) error { a.Username = "Alice"; return nil }, nil, false},
		{"rename to taken", "a1", func(a *store.Account) error { a.Username = "BOB"; a.Role = store.RoleMember; return nil }, fault.ErrExists, false},
		{"change id", "a1", func(a *store.Account) error { a.ID = "zz"; return nil }, fault.ErrInvalid, false},
		{"empty name", "a1", func(a *store.Account) error { a.Username = ""; return nil }, fault.ErrInvalid, false},
		{"fn aborts", "a1", func(a *store.Account) error { a.Role = store.RoleMember; return errReject }, errReject, true},
		{"missing", "ghost", func(a *store.Account) error { return nil }, fault.ErrNotFound, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.Account(tc.id)
			got, err := s.UpdateAccount(tc.id, tc.fn)
			wantClass(t, "UpdateAccount", err, tc.class)
			if tc.same && err != tc.class {
				t.Fatalf("fn's error came back as %#v, want it as is", err)
			}
			after, _ := s.Account(tc.id)
			if tc.class != nil {
				equal(t, "after a failed update", after, before)
				return
			}
			want := before
			tc.fn(&want)
			equal(t, "returned", got, want)
			equal(t, "stored", after, want)
		})
	}
	a, err := s.AccountByUsername("ALICE")
	wantClass(t, "AccountByUsername after recase", err, nil)
	equal(t, "final account", a, store.Account{ID: "a1", Username: "Alice", PasswordHash: "h2", Role: store.RoleAdmin, CreatedAt: at(0)})

	// A real rename frees the old name and claims the new one.
	if _, err := s.UpdateAccount("a1", func(a *store.Account) error { a.Username = "ally"; return nil }); err != nil {
		t.Fatal(err)
	}
	_, err = s.AccountByUsername("alice")
	wantClass(t, "old name after rename", err, fault.ErrNotFound)
	if a, err := s.AccountByUsername("ALLY"); err != nil || a.ID != "a1" {
		t.Fatalf("new name after rename: %+v, %v", a, err)
	}
	wantClass(t, "reuse the freed name", s.CreateAccount(store.Account{ID: "a3", Username: "alice"}), nil)
}

func testAgents(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	full := store.Agent{ID: "g1", AccountID: "a1", Name: "Helper", Computer: "vm", AllowHostEnvironment: true,
		WorkDir: "/srv/project", CreatedAt: at(5), UpdatedAt: at(6)}
	creates := []struct {
		name  string
		a     store.Agent
		class error
	}{
		{"full", full, nil},
		{"no computer", store.Agent{ID: "g2", AccountID: "a1", Name: "Plain", CreatedAt: at(1)}, nil},
		{"other account", store.Agent{ID: "g3", AccountID: "a2", Name: "Theirs", Computer: "browser", CreatedAt: at(3)}, nil},
		{"same time, smaller id", store.Agent{ID: "g0", AccountID: "a1", Name: "Tie", Computer: "auto", CreatedAt: at(5)}, nil},
		{"any computer value is kept", store.Agent{ID: "g4", AccountID: "a2", Computer: "something-new", CreatedAt: at(9)}, nil},
		{"duplicate id", store.Agent{ID: "g1", AccountID: "a2", CreatedAt: at(7)}, fault.ErrExists},
		{"empty id", store.Agent{AccountID: "a1"}, fault.ErrInvalid},
	}
	for _, tc := range creates {
		t.Run("create/"+tc.name, func(t *testing.T) {
			wantClass(t, "CreateAgent", s.CreateAgent(tc.a), tc.class)
		})
	}
	got, err := s.Agent("g1")
	wantClass(t, "Agent", err, nil)
	equal(t, "Agent(g1)", got, full)

	_, err = s.Agent("x")
	wantClass(t, "Agent(x)", err, fault.ErrNotFound)
	if !strings.Contains(err.Error(), `agent "x" not found`) {
		t.Fatalf("miss message %q does not name the agent", err)
	}

	lists := []struct {
		name, account string
		want          []string
	}{
		{"all", "", []string{"g2", "g3", "g0", "g1", "g4"}},
		{"a1", "a1", []string{"g2", "g0", "g1"}},
		{"a2", "a2", []string{"g3", "g4"}},
		{"none", "a9", []string{}},
	}
	for _, tc := range lists {
		t.Run("list/"+tc.name, func(t *testing.T) {
			list, err := s.Agents(tc.account)
			wantClass(t, "Agents", err, nil)
			equal(t, "Agents("+tc.account+")", ids(list, agentID), tc.want)
		})
	}
}

func testUpdateAgent(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	if err := s.CreateAgent(store.Agent{ID: "g1", AccountID: "a1", Name: "Old", Computer: "vm", CreatedAt: at(0), UpdatedAt: at(0)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		id    string
		fn    func(*store.Agent) error
		class error
		same  bool
	}{
		{"rename", "g1", func(a *store.Agent) error { a.Name = "New"; a.UpdatedAt = at(1); return nil }, nil, false},
		{"allow host", "g1", func(a *store.Agent) error { a.AllowHostEnvironment = true; return nil }, nil, false},
		{"work dir", "g1", func(a *store.Agent) error { a.WorkDir = "/w"; return nil }, nil, false},
		{"switch computer", "g1", func(a *store.Agent) error {
			a.Computer, a.AllowHostEnvironment = "host", false
			return nil
		}, nil, false},
		{"fn aborts", "g1", func(a *store.Agent) error { a.Name = "Lost"; a.Computer = "none"; return errReject }, errReject, true},
		{"fn aborts with a class", "g1", func(a *store.Agent) error {
			a.Name = "Lost"
			return fault.Invalid("computer %q is not allowed", "hybrid")
		}, fault.ErrInvalid, false},
		{"change id", "g1", func(a *store.Agent) error { a.ID = "g2"; return nil }, fault.ErrInvalid, false},
		{"missing", "ghost", func(a *store.Agent) error { return nil }, fault.ErrNotFound, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.Agent(tc.id)
			got, err := s.UpdateAgent(tc.id, tc.fn)
			wantClass(t, "UpdateAgent", err, tc.class)
			if tc.same && err != tc.class {
				t.Fatalf("fn's error came back as %#v, want it as is", err)
			}
			after, _ := s.Agent(tc.id)
			if tc.class != nil {
				equal(t, "after a failed update", after, before)
				return
			}
			want := before
			tc.fn(&want)
			equal(t, "returned", got, want)
			equal(t, "stored", after, want)
		})
	}
	if _, err := s.Agent("g2"); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("an aborted id change created g2: %v", err)
	}
}

func testDeleteAgent(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	for _, id := range []string{"g1", "g2"} {
		if err := s.CreateAgent(store.Agent{ID: id, AccountID: "a1"}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, id string
		class    error
	}{
		{"existing", "g1", nil},
		{"again", "g1", fault.ErrNotFound},
		{"never existed", "nope", fault.ErrNotFound},
		{"empty id", "", fault.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantClass(t, "DeleteAgent", s.DeleteAgent(tc.id), tc.class)
		})
	}
	_, err := s.Agent("g1")
	wantClass(t, "Agent after delete", err, fault.ErrNotFound)
	list, err := s.Agents("")
	wantClass(t, "Agents", err, nil)
	equal(t, "remaining", ids(list, agentID), []string{"g2"})
	wantClass(t, "recreate a deleted id", s.CreateAgent(store.Agent{ID: "g1"}), nil)
}

func testNodeSettings(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	def := store.NodeSettings{NodeID: "n1", IdleStopMinutes: 5, Isolation: "per-agent", MaxInstances: 2}
	got, err := s.NodeSettings("n1")
	wantClass(t, "NodeSettings", err, nil)
	equal(t, "defaults", got, def)

	tests := []struct {
		name  string
		node  string
		fn    func(*store.NodeSettings) error
		want  store.NodeSettings // stored afterwards
		class error
	}{
		{"never idle stop", "n1", func(n *store.NodeSettings) error { n.IdleStopMinutes = 0; n.IdlePolicyRequestID = "r1"; return nil },
			store.NodeSettings{NodeID: "n1", IdleStopMinutes: 0, Isolation: "per-agent", MaxInstances: 2, IdlePolicyRequestID: "r1"}, nil},
		{"policy", "n1", func(n *store.NodeSettings) error { n.Isolation = "shared"; n.MaxInstances = 4; return nil },
			store.NodeSettings{NodeID: "n1", IdleStopMinutes: 0, Isolation: "shared", MaxInstances: 4, IdlePolicyRequestID: "r1"}, nil},
		{"fn aborts", "n1", func(n *store.NodeSettings) error { n.MaxInstances = 1; return errReject },
			store.NodeSettings{NodeID: "n1", IdleStopMinutes: 0, Isolation: "shared", MaxInstances: 4, IdlePolicyRequestID: "r1"}, errReject},
		{"fn aborts on a new node", "n2", func(n *store.NodeSettings) error { n.MaxInstances = 1; return errReject },
			store.NodeSettings{NodeID: "n2", IdleStopMinutes: 5, Isolation: "per-agent", MaxInstances: 2}, errReject},
		{"change node id", "n1", func(n *store.NodeSettings) error { n.NodeID = "n9"; return nil },
			store.NodeSettings{NodeID: "n1", IdleStopMinutes: 0, Isolation: "shared", MaxInstances: 4, IdlePolicyRequestID: "r1"}, fault.ErrInvalid},
		{"other node starts from defaults", "n3", func(n *store.NodeSettings) error { n.IdleStopMinutes = 30; return nil },
			store.NodeSettings{NodeID: "n3", IdleStopMinutes: 30, Isolation: "per-agent", MaxInstances: 2}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.UpdateNodeSettings(tc.node, tc.fn)
			wantClass(t, "UpdateNodeSettings", err, tc.class)
			if tc.class == errReject && err != errReject {
				t.Fatalf("fn's error came back as %#v, want it as is", err)
			}
			if tc.class == nil {
				equal(t, "returned", got, tc.want)
			}
			stored, err := s.NodeSettings(tc.node)
			wantClass(t, "NodeSettings", err, nil)
			equal(t, "stored", stored, tc.want)
		})
	}
	_, err = s.NodeSettings("")
	wantClass(t, "NodeSettings(\"\")", err, fault.ErrInvalid)
	_, err = s.UpdateNodeSettings("", func(*store.NodeSettings) error { return nil })
	wantClass(t, "UpdateNodeSettings(\"\")", err, fault.ErrInvalid)
}

func reopen(t *testing.T, s *store.Store) *store.Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2, err := store.Open(s.Path(), store.Options{})
	if err != nil {
		t.Fatalf("reopen %s: %v", s.Path(), err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

func testPersistence(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	ver, err := s.SchemaVersion()
	wantClass(t, "SchemaVersion", err, nil)
	if ver < 2 {
		t.Fatalf("a new store has schema version %d, want the latest (≥2)", ver)
	}
	acc := store.Account{ID: "a1", Username: "Root", PasswordHash: "$2a$10$x", Role: store.RoleAdmin, CreatedAt: at(0)}
	ag := store.Agent{ID: "g1", AccountID: "a1", Name: "Bot", Computer: "cloud", AllowHostEnvironment: true, WorkDir: "~/w", CreatedAt: at(1), UpdatedAt: at(2)}
	if err := s.CreateAccount(acc); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAgent(ag); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAgent(store.Agent{ID: "gone", AccountID: "a1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAgent("gone"); err != nil {
		t.Fatal(err)
	}
	ns, err := s.UpdateNodeSettings("n1", func(n *store.NodeSettings) error { n.IdleStopMinutes = 120; return nil })
	if err != nil {
		t.Fatal(err)
	}

	s = reopen(t, s)
	if v, err := s.SchemaVersion(); err != nil || v != ver {
		t.Fatalf("SchemaVersion after reopen = %d, %v; want %d", v, err, ver)
	}
	got, err := s.AccountByUsername("root")
	wantClass(t, "AccountByUsername after reopen", err, nil)
	equal(t, "account after reopen", got, acc)
	gotAg, err := s.Agent("g1")
	wantClass(t, "Agent after reopen", err, nil)
	equal(t, "agent after reopen", gotAg, ag)
	_, err = s.Agent("gone")
	wantClass(t, "deleted agent after reopen", err, fault.ErrNotFound)
	gotNs, err := s.NodeSettings("n1")
	wantClass(t, "NodeSettings after reopen", err, nil)
	equal(t, "node settings after reopen", gotNs, ns)
	wantClass(t, "username index after reopen", s.CreateAccount(store.Account{ID: "a2", Username: "ROOT"}), fault.ErrExists)
}

func testConcurrentUpdates(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	if err := s.CreateAgent(store.Agent{ID: "g1", Name: "0"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAccount(store.Account{ID: "a1", Username: "u", PasswordHash: "0"}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 15
	inc := func(s string) (string, error) {
		n, err := strconv.Atoi(s)
		return strconv.Itoa(n + 1), err
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, err := s.UpdateAgent("g1", func(a *store.Agent) (err error) { a.Name, err = inc(a.Name); return err })
				if err == nil {
					_, err = s.UpdateNodeSettings("n1", func(n *store.NodeSettings) error { n.MaxInstances++; return nil })
				}
				if err == nil {
					_, err = s.UpdateAccount("a1", func(a *store.Account) (err error) { a.PasswordHash, err = inc(a.PasswordHash); return err })
				}
				if err == nil {
					// Readers run alongside the writers.
					_, err = s.Agents("")
				}
				if err == nil && i%5 == 0 {
					id := fmt.Sprintf("w%d-%d", w, i)
					if err = s.CreateAgent(store.Agent{ID: id}); err == nil {
						err = s.DeleteAgent(id)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent update: %v", err)
	}
	const total = workers * each
	a, _ := s.Agent("g1")
	ns, _ := s.NodeSettings("n1")
	acc, _ := s.Account("a1")
	if a.Name != strconv.Itoa(total) || ns.MaxInstances != 2+total || acc.PasswordHash != strconv.Itoa(total) {
		t.Fatalf("lost updates: agent counter %s, node counter %d (want %d), account counter %s; want %d",
			a.Name, ns.MaxInstances, 2+total, acc.PasswordHash, total)
	}
	list, _ := s.Agents("")
	equal(t, "agents left", ids(list, agentID), []string{"g1"})
}

func testLockTimeout(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	const timeout = 150 * time.Millisecond
	start := time.Now()
	s2, err := store.Open(s.Path(), store.Options{LockTimeout: timeout})
	waited := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("a second Open of a file in use succeeded")
	}
	wantClass(t, "second Open", err, fault.ErrUnavailable)
	for _, part := range []string{s.Path(), "in use by another Cubicle process", "--data-dir"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("lock error %q does not mention %q", err, part)
		}
	}
	if waited < timeout/2 || waited > timeout+2*time.Second {
		t.Errorf("second Open gave up after %v, want about %v", waited, timeout)
	}
	t.Logf("second Open refused after %v (timeout %v)", waited, timeout)
	// The first store still works, and once it is closed the file can be opened again.
	if _, err := s.NodeSettings("n"); err != nil {
		t.Fatalf("first store after the refused Open: %v", err)
	}
	reopen(t, s)
}

func testNewerSchema(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	path := s.Path()
	if err := s.CreateAgent(store.Agent{ID: "g1", Computer: "vm"}); err != nil {
		t.Fatal(err)
	}
	ver, err := s.SchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	future := ver + 1
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("version"), []byte(strconv.Itoa(future)))
	})
	if cerr := db.Close(); err != nil || cerr != nil {
		t.Fatalf("write a future version: %v, %v", err, cerr)
	}
	before := fileSum(t, path)

	s2, err := store.Open(path, store.Options{})
	if err == nil {
		s2.Close()
		t.Fatal("Open accepted a file from a newer Cubicle")
	}
	wantClass(t, "Open of a newer file", err, fault.ErrConflict)
	if !strings.Contains(err.Error(), "update Cubicle") || !strings.Contains(err.Error(), strconv.Itoa(future)) {
		t.Errorf("newer-schema error %q should give the version and say to update Cubicle", err)
	}
	if after := fileSum(t, path); after != before {
		t.Error("Open changed a file it refused")
	}
	if baks, _ := filepath.Glob(path + ".bak*"); len(baks) > 0 {
		t.Errorf("Open of a newer file left backups %v", baks)
	}
	// The refusal released the lock: the file can still be opened by bbolt directly.
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("file still locked after the refused Open: %v", err)
	}
	db.Close()
}

func testClosed(t *testing.T, open func(t *testing.T) *store.Store) {
	s := open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := s.Agent("g1")
	wantClass(t, "Agent on a closed store", err, fault.ErrUnavailable)
	wantClass(t, "CreateAgent on a closed store", s.CreateAgent(store.Agent{ID: "g1"}), fault.ErrUnavailable)
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
