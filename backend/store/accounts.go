package store

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// Role is what an account may do.
type Role string

// The roles.
const (
	RoleAdmin Role = "admin"
	RoleUser  Role = "user"
)

// Account is a person who can log in. Usernames are unique, compared case-insensitively.
type Account struct {
	ID           string    `json:"id"`
	Username     string    `json:"username"`
	PasswordHash string    `json:"passwordHash"`
	Role         Role      `json:"role"`
	CreatedAt    time.Time `json:"createdAt"`
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
