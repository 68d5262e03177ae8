// Package hostaccess decides whether an account's agents may act on an execution node's host
// (SPEC §1.6, §3): host access is granted by an administrator per account and per node, never
// taken by ticking a box. Host tools (host_shell, host_read_file, host_write_file,
// computer_copy_file) need the HostTools grant; host desktop tools (the node's own screen and
// input) need HostDesktop. Administrators hold both on every node; a disabled or deleted
// account holds nothing.
//
// Check is the one function every consumer asks — the computer selection route, the toolbox's
// environment lookup, the settings page — so they cannot disagree. A Checker is safe for
// concurrent use.
package hostaccess

import (
	"errors"
	"fmt"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// LocalNode is the id of the managed local runner (the node the server itself runs on).
const LocalNode = "local"

// Store is the part of the store the checker needs.
type Store interface {
	Account(id string) (store.Account, error)
	HostGrant(accountID, nodeID string) (store.HostGrant, error)
	HostGrants(accountID string) ([]store.HostGrant, error)
	PutHostGrant(g store.HostGrant) error
}

// Access is what an account may do on a node's host.
type Access struct {
	HostTools   bool `json:"hostTools"`
	HostDesktop bool `json:"hostDesktop"`
	// Placement: the account may place its agents on the node (a runner; on the server's own
	// node, LocalNode, everyone may: see Checker.Placement).
	Placement bool `json:"placement"`
	// ByRole is set when the access comes from the administrator role rather than a grant.
	ByRole bool `json:"byRole,omitempty"`
}

// Checker answers host-access questions from the store.
type Checker struct {
	st  Store
	now func() time.Time
}

// New returns a Checker over st.
func New(st Store) *Checker { return &Checker{st: st, now: time.Now} }

// Check returns what accountID may do on nodeID's host. A missing account has no access
// (not an error); other store failures are returned.
func (c *Checker) Check(accountID, nodeID string) (Access, error) {
	if accountID == "" || nodeID == "" {
		return Access{}, nil
	}
	a, err := c.st.Account(accountID)
	switch {
	case errors.Is(err, fault.ErrNotFound):
		return Access{}, nil
	case err != nil:
		return Access{}, fmt.Errorf("host access: %w", err)
	case a.Disabled:
		return Access{}, nil
	case a.Role == store.RoleAdmin:
		return Access{HostTools: true, HostDesktop: true, Placement: true, ByRole: true}, nil
	}
	g, err := c.st.HostGrant(accountID, nodeID)
	if err != nil {
		return Access{}, fmt.Errorf("host access: %w", err)
	}
	return Access{HostTools: g.HostTools, HostDesktop: g.HostDesktop, Placement: g.Placement}, nil
}

// Grants returns the grants saved for accountID, by node (what the Users page shows; an
// administrator's role-given access is not a grant).
func (c *Checker) Grants(accountID string) (map[string]Access, error) {
	gs, err := c.st.HostGrants(accountID)
	if err != nil {
		return nil, err
	}
	out := map[string]Access{}
	for _, g := range gs {
		out[g.NodeID] = Access{HostTools: g.HostTools, HostDesktop: g.HostDesktop, Placement: g.Placement}
	}
	return out, nil
}

// Grant saves an administrator's grant (by is the administrator's account id). Granting
// nothing removes the grant. An unknown account is fault.ErrNotFound.
func (c *Checker) Grant(by, accountID, nodeID string, a Access) error {
	if nodeID == "" {
		return fault.Invalid("name the execution node (\"%s\" is this server's own)", LocalNode)
	}
	return c.st.PutHostGrant(store.HostGrant{AccountID: accountID, NodeID: nodeID, HostTools: a.HostTools,
		HostDesktop: a.HostDesktop, Placement: a.Placement, GrantedBy: by, UpdatedAt: c.now().UTC()})
}

// Placement reports whether accountID may place its agents on nodeID: on the server's own
// node (LocalNode) everyone may; on a runner an administrator, or an account granted it.
func (c *Checker) Placement(accountID, nodeID string) (bool, error) {
	if nodeID == LocalNode {
		return true, nil
	}
	a, err := c.Check(accountID, nodeID)
	return a.Placement, err
}

// HostTools reports whether accountID may use host tools on nodeID (profile.HostAccess).
func (c *Checker) HostTools(accountID, nodeID string) (bool, error) {
	a, err := c.Check(accountID, nodeID)
	return a.HostTools, err
}
