package store

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Role is what an account may do.
type Role string

// The roles: an admin changes the app's settings and manages accounts; a member uses its own
// agents only.
const (
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
)

// UnmarshalJSON reads a role; the legacy word "user" (before accounts had roles other than
// admin) is a member.
func (r *Role) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "user" {
		s = string(RoleMember)
	}
	*r = Role(s)
	return nil
}

// Account is a person who can log in. Usernames are unique, compared case-insensitively.
type Account struct {
	ID           string    `json:"id"`
	Username     string    `json:"username"`
	PasswordHash string    `json:"passwordHash"`
	Role         Role      `json:"role"`
	CreatedAt    time.Time `json:"createdAt"`
	// Disabled accounts cannot log in and their sessions end.
	Disabled bool `json:"disabled,omitempty"`
	// SessionGen is the account's session generation: every session token carries the value
	// it was issued under, and bumping it (password change, disabling, "log out everywhere")
	// ends every session issued before. It lives in the store, so the end survives a restart.
	SessionGen uint64 `json:"sessionGen,omitempty"`
	// PasswordChosen is set when a person chose the password (not generated at first start)
	// and it passed the strength check; only such a password may face a network.
	PasswordChosen bool      `json:"passwordChosen,omitempty"`
	PasswordSetAt  time.Time `json:"passwordSetAt,omitzero"`
	CreatedBy      string    `json:"createdBy,omitempty"` // the admin's account id; "" for the first admin
}

var accounts = table[Account]{bucket: bucketAccounts, kind: "account"}

// CreateAccount stores a new account. It fails with fault.ErrInvalid when the ID or username
// is empty and with fault.ErrExists when the ID or the username (in any letter case) is taken.
func (s *Store) CreateAccount(a Account) error {
	if a.ID == "" || strings.TrimSpace(a.Username) == "" {
		return fault.Invalid("create account: an account needs an id and a username")
	}
	return s.update("create account", func(tx *bbolt.Tx) error {
		ok, err := accounts.has(tx, a.ID)
		if err != nil {
			return err
		}
		if ok {
			return fault.Exists("account %q already exists", a.ID)
		}
		if err := claimUsername(tx, a.Username, a.ID); err != nil {
			return err
		}
		return accounts.put(tx, a.ID, a)
	})
}

// Account returns account id, or a fault.ErrNotFound error.
func (s *Store) Account(id string) (Account, error) {
	var a Account
	err := s.view("get account", func(tx *bbolt.Tx) (err error) {
		a, err = accounts.get(tx, id)
		return err
	})
	return a, err
}

// AccountByUsername returns the account whose username equals name in any letter case, or a
// fault.ErrNotFound error.
func (s *Store) AccountByUsername(name string) (Account, error) {
	var a Account
	err := s.view("get account by username", func(tx *bbolt.Tx) (err error) {
		id := tx.Bucket(bucketUsernames).Get([]byte(foldKey(name)))
		if id == nil {
			return fault.NotFound("no account with username %q", name)
		}
		a, err = accounts.get(tx, string(id))
		return err
	})
	return a, err
}

// Accounts returns all accounts, oldest first (ties by ID).
func (s *Store) Accounts() ([]Account, error) {
	var out []Account
	err := s.view("list accounts", func(tx *bbolt.Tx) (err error) {
		out, err = accounts.list(tx, nil)
		return err
	})
	slices.SortFunc(out, func(a, b Account) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, err
}

// UpdateAccount changes account id with fn in one transaction and returns the result. An
// error from fn aborts the update (nothing changes) and is returned as is. fn may rename the
// account (fault.ErrExists when the new name is taken) but not change its ID.
func (s *Store) UpdateAccount(id string, fn func(*Account) error) (Account, error) {
	var a Account
	err := s.update("update account", func(tx *bbolt.Tx) (err error) {
		a, err = accounts.modify(tx, id, fn, func(old, new Account) error {
			if new.ID != old.ID {
				return fault.Invalid("update account %q: the id cannot change", id)
			}
			if strings.TrimSpace(new.Username) == "" {
				return fault.Invalid("update account %q: the username cannot be empty", id)
			}
			if foldKey(new.Username) == foldKey(old.Username) {
				return nil
			}
			if err := claimUsername(tx, new.Username, id); err != nil {
				return err
			}
			return tx.Bucket(bucketUsernames).Delete([]byte(foldKey(old.Username)))
		})
		return err
	})
	return a, err
}

// claimUsername records name as taken by account id, or fails with fault.ErrExists.
func claimUsername(tx *bbolt.Tx, name, id string) error {
	idx := tx.Bucket(bucketUsernames)
	key := []byte(foldKey(name))
	if idx.Get(key) != nil {
		return fault.Exists("the username %q is taken", name)
	}
	return idx.Put(key, []byte(id))
}

// DeleteAccount removes account id with its username and its host grants; a miss is
// fault.ErrNotFound. The account's agents and conversations are the caller's business.
func (s *Store) DeleteAccount(id string) error {
	return s.update("delete account", func(tx *bbolt.Tx) error {
		a, err := accounts.get(tx, id)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketUsernames).Delete([]byte(foldKey(a.Username))); err != nil {
			return err
		}
		if err := deletePrefix(tx.Bucket(bucketHostGrants), []byte(id+"\x00")); err != nil {
			return err
		}
		return accounts.del(tx, id)
	})
}
