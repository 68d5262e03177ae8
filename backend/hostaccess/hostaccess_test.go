package hostaccess

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "cubicle.db"), store.Options{KeepBackups: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, a := range []store.Account{
		{ID: "adm", Username: "admin", Role: store.RoleAdmin},
		{ID: "mem", Username: "bob", Role: store.RoleMember},
		{ID: "off", Username: "carol", Role: store.RoleAdmin, Disabled: true},
	} {
		a.CreatedAt = time.Now()
		if err := st.CreateAccount(a); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// Host access is granted per account and per node, never held by a member without a grant,
// by a disabled account, or by an account that no longer exists (issue 15, item 2).
func TestCheck(t *testing.T) {
	st := openStore(t)
	c := New(st)
	check := func(account, node string, want Access) {
		t.Helper()
		got, err := c.Check(account, node)
		if err != nil || got != want {
			t.Fatalf("Check(%q, %q) = %+v, %v; want %+v", account, node, got, err, want)
		}
	}
	check("adm", LocalNode, Access{HostTools: true, HostDesktop: true, Placement: true, ByRole: true})
	check("mem", LocalNode, Access{})
	check("off", LocalNode, Access{}) // a disabled administrator holds nothing
	check("gone", LocalNode, Access{})
	check("", LocalNode, Access{})
	check("mem", "", Access{})

	if err := c.Grant("adm", "mem", LocalNode, Access{HostTools: true}); err != nil {
		t.Fatal(err)
	}
	check("mem", LocalNode, Access{HostTools: true})
	check("mem", "runner-2", Access{}) // per node: a grant on one node is not one on another
	if ok, err := c.HostTools("mem", LocalNode); !ok || err != nil {
		t.Fatalf("HostTools: %v %v", ok, err)
	}
	if g, _ := st.HostGrant("mem", LocalNode); g.GrantedBy != "adm" || g.UpdatedAt.IsZero() {
		t.Fatalf("grant record %+v", g)
	}
	if err := c.Grant("adm", "mem", "runner-2", Access{HostDesktop: true}); err != nil {
		t.Fatal(err)
	}
	gs, err := c.Grants("mem")
	if err != nil || len(gs) != 2 || !gs[LocalNode].HostTools || gs[LocalNode].HostDesktop || !gs["runner-2"].HostDesktop {
		t.Fatalf("grants %+v, %v", gs, err)
	}
	// Placing agents on a runner needs its own grant; the server's own node needs none.
	if ok, err := c.Placement("mem", "runner-2"); ok || err != nil {
		t.Fatalf("placement on a runner without a grant: %v %v", ok, err)
	}
	if ok, err := c.Placement("mem", LocalNode); !ok || err != nil {
		t.Fatalf("placement on the server's own node: %v %v", ok, err)
	}
	if err := c.Grant("adm", "mem", "runner-3", Access{Placement: true}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Placement("mem", "runner-3"); !ok || err != nil {
		t.Fatalf("placement on a runner with a grant: %v %v", ok, err)
	}
	if err := c.Grant("adm", "mem", "runner-3", Access{}); err != nil {
		t.Fatal(err)
	}
	// Disabling the account withdraws everything at once; enabling it again restores its grant.
	if _, err := st.UpdateAccount("mem", func(a *store.Account) error { a.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	check("mem", LocalNode, Access{})
	if _, err := st.UpdateAccount("mem", func(a *store.Account) error { a.Disabled = false; return nil }); err != nil {
		t.Fatal(err)
	}
	// Granting nothing withdraws the grant.
	if err := c.Grant("adm", "mem", LocalNode, Access{}); err != nil {
		t.Fatal(err)
	}
	check("mem", LocalNode, Access{})
	check("mem", "runner-2", Access{HostDesktop: true})
	if gs, _ := c.Grants("mem"); len(gs) != 1 {
		t.Fatalf("a withdrawn grant is still listed: %+v", gs)
	}
	// No node named: refused, nothing saved.
	if err := c.Grant("adm", "mem", "", Access{HostTools: true}); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("grant without a node: %v", err)
	}
	// An administrator's role-given access is never reported as a grant.
	if gs, _ := c.Grants("adm"); len(gs) != 0 {
		t.Fatalf("an administrator's role shows as grants: %+v", gs)
	}
}
