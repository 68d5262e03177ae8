package auth

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mtibben/confusables"
	"golang.org/x/text/secure/precis"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// NewAccount is what an administrator gives to create an account.
type NewAccount struct {
	Username string
	Password string
	Role     store.Role // "" = member
}

// AccountChange is an administrator's change of an account; nil fields stay as they are.
type AccountChange struct {
	Role     *store.Role
	Disabled *bool
	Password *string // a new password (ends the account's sessions)
}

// checkUsername returns the cleaned username or a fault.ErrInvalid error.
func checkUsername(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", fault.Invalid("enter a username")
	case utf8.RuneCountInString(name) > 64:
		return "", fault.Invalid("the username is too long: use at most 64 characters")
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) || r == '/' }):
		return "", fault.Invalid("the username may not contain spaces, slashes or control characters")
	}
	// PRECIS (RFC 8265): full-width letters become their ordinary form, decomposed ones are
	// composed (NFC), and invisible or formatting characters (zero-width space, joiners, soft
	// hyphen, direction overrides) are refused.
	norm, err := precis.UsernameCasePreserved.String(name)
	if err != nil {
		return "", fault.Invalid("the username %+q holds a character a username may not (an invisible, formatting or unassigned one): use visible letters, digits and symbols", name)
	}
	return norm, nil
}

// skeleton is what name looks like (Unicode TS #39): names with one skeleton can be
// mistaken for each other ("admin", "аdmin" with a Cyrillic а, "adrnin", "admın").
func skeleton(name string) string {
	return confusables.Skeleton(strings.ToLower(name))
}

// lookAlike returns an existing account's username that name could be mistaken for, or "".
func (s *Service) lookAlike(name string) (string, error) {
	accts, err := s.accounts.Accounts()
	if err != nil {
		return "", fmt.Errorf("check username: %w", err)
	}
	sk := skeleton(name)
	for _, a := range accts {
		if strings.EqualFold(a.Username, name) || skeleton(a.Username) == sk {
			return a.Username, nil
		}
	}
	return "", nil
}

func checkRole(r store.Role) (store.Role, error) {
	switch r {
	case "":
		return store.RoleMember, nil
	case store.RoleAdmin, store.RoleMember:
		return r, nil
	}
	return "", fault.Invalid("unknown role %q: use admin or member", r)
}

// CreateAccount makes an account for by (an administrator). The password must pass
// CheckPassword; a taken username is fault.ErrExists.
func (s *Service) CreateAccount(by Principal, n NewAccount) (store.Account, error) {
	if !by.Admin() {
		return store.Account{}, fault.Forbidden("only administrators can create accounts")
	}
	name, err := checkUsername(n.Username)
	if err != nil {
		return store.Account{}, err
	}
	role, err := checkRole(n.Role)
	if err != nil {
		return store.Account{}, err
	}
	if other, err := s.lookAlike(name); err != nil {
		return store.Account{}, err
	} else if other != "" {
		return store.Account{}, fault.Exists("the username %+q is taken or looks like the existing account %+q: choose one that cannot be mistaken for it", name, other)
	}
	if err := CheckPassword(n.Password, name); err != nil {
		return store.Account{}, err
	}
	hash, err := HashPassword(n.Password)
	if err != nil {
		return store.Account{}, err
	}
	id, err := NewID()
	if err != nil {
		return store.Account{}, err
	}
	now := s.now().UTC()
	a := store.Account{ID: id, Username: name, PasswordHash: hash, Role: role, CreatedAt: now,
		PasswordChosen: true, PasswordSetAt: now, CreatedBy: by.AccountID}
	if err := s.accounts.CreateAccount(a); err != nil {
		return store.Account{}, fmt.Errorf("create account: %w", err)
	}
	s.log.Info("account created", "by", by.Username, "username", name, "role", role)
	return a, nil
}

// UpdateAccount applies an administrator's change to account id. Disabling an account or
// setting its password ends its sessions. The last enabled administrator cannot be disabled
// or made a member, and nobody disables or demotes their own account (another administrator
// must), so the app always keeps an administrator who can log in.
func (s *Service) UpdateAccount(by Principal, id string, c AccountChange) (store.Account, error) {
	if !by.Admin() {
		return store.Account{}, fault.Forbidden("only administrators can change accounts")
	}
	var hash string
	if c.Password != nil {
		target, err := s.accounts.Account(id)
		if err != nil {
			return store.Account{}, fmt.Errorf("update account: %w", err)
		}
		if err := CheckPassword(*c.Password, target.Username); err != nil {
			return store.Account{}, err
		}
		if hash, err = HashPassword(*c.Password); err != nil {
			return store.Account{}, err
		}
	}
	if c.Role != nil {
		r, err := checkRole(*c.Role)
		if err != nil {
			return store.Account{}, err
		}
		c.Role = &r
	}
	self := id == by.AccountID
	if self && ((c.Disabled != nil && *c.Disabled) || (c.Role != nil && *c.Role != store.RoleAdmin)) {
		return store.Account{}, fault.Conflict("you cannot disable your own account or take away your own admin role; ask another administrator")
	}
	losesAdmin := (c.Disabled != nil && *c.Disabled) || (c.Role != nil && *c.Role != store.RoleAdmin)
	if losesAdmin {
		if err := s.keepAnAdmin(id); err != nil {
			return store.Account{}, err
		}
	}
	now := s.now().UTC()
	a, err := s.accounts.UpdateAccount(id, func(a *store.Account) error {
		if c.Role != nil {
			a.Role = *c.Role
		}
		if c.Disabled != nil && *c.Disabled != a.Disabled {
			a.Disabled = *c.Disabled
			if a.Disabled {
				a.SessionGen++
			}
		}
		if hash != "" {
			a.PasswordHash, a.PasswordChosen, a.PasswordSetAt = hash, true, now
			a.SessionGen++
		}
		return nil
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("update account: %w", err)
	}
	s.log.Info("account changed", "by", by.Username, "username", a.Username, "role", a.Role, "disabled", a.Disabled,
		"newPassword", hash != "")
	return a, nil
}

// keepAnAdmin refuses to take away the admin role (or the login) of id when it is the last
// enabled administrator.
func (s *Service) keepAnAdmin(id string) error {
	accts, err := s.accounts.Accounts()
	if err != nil {
		return fmt.Errorf("count administrators: %w", err)
	}
	others := 0
	for _, a := range accts {
		if a.ID != id && a.Role == store.RoleAdmin && !a.Disabled {
			others++
		}
	}
	if others == 0 {
		return fault.Conflict("this is the last enabled administrator; make another account an administrator first")
	}
	return nil
}

// CheckDelete returns the error DeleteAccount would refuse with, without changing anything
// (so a caller can check before it removes the account's agents).
func (s *Service) CheckDelete(by Principal, id string) (store.Account, error) {
	if !by.Admin() {
		return store.Account{}, fault.Forbidden("only administrators can delete accounts")
	}
	if id == by.AccountID {
		return store.Account{}, fault.Conflict("you cannot delete your own account; ask another administrator")
	}
	a, err := s.accounts.Account(id)
	if err != nil {
		return store.Account{}, fmt.Errorf("delete account: %w", err)
	}
	if a.Role == store.RoleAdmin && !a.Disabled {
		if err := s.keepAnAdmin(id); err != nil {
			return store.Account{}, err
		}
	}
	return a, nil
}

// DeleteAccount removes account id (its username and host grants; the caller removes its
// agents first). Nobody deletes their own account, and the last enabled administrator stays.
func (s *Service) DeleteAccount(by Principal, id string) error {
	a, err := s.CheckDelete(by, id)
	if err != nil {
		return err
	}
	if err := s.accounts.DeleteAccount(id); err != nil {
		return fmt.Errorf("delete account: %w", err)
	}
	s.log.Info("account deleted", "by", by.Username, "username", a.Username)
	return nil
}

// ChangePassword lets p change its own password: the current one must be right (counted by
// the login limit like a login) and the new one pass CheckPassword. Every session of the
// account ends, including p's; the returned principal is a fresh session for the caller.
func (s *Service) ChangePassword(p Principal, current, next, client string) (Principal, error) {
	acct, err := s.accounts.Account(p.AccountID)
	if err != nil {
		return Principal{}, fmt.Errorf("change password: %w", err)
	}
	done, err := s.limiter.begin(acct.Username, client, "")
	if err != nil {
		return Principal{}, err
	}
	ok := s.compare([]byte(acct.PasswordHash), []byte(current)) == nil
	done(ok)
	if !ok {
		return Principal{}, fault.Invalid("the current password is wrong")
	}
	if current == next {
		return Principal{}, fault.Invalid("the new password is the same as the current one")
	}
	if err := CheckPassword(next, acct.Username); err != nil {
		return Principal{}, err
	}
	hash, err := HashPassword(next)
	if err != nil {
		return Principal{}, err
	}
	now := s.now().UTC()
	acct, err = s.accounts.UpdateAccount(p.AccountID, func(a *store.Account) error {
		a.PasswordHash, a.PasswordChosen, a.PasswordSetAt = hash, true, now
		a.SessionGen++
		return nil
	})
	if err != nil {
		return Principal{}, fmt.Errorf("change password: %w", err)
	}
	s.log.Info("password changed", "username", acct.Username)
	return s.Issue(acct)
}

// ResetPassword sets username's password on the server's own machine (`cubicle admin
// reset-password`): no current password is needed, the new one must pass CheckPassword, and
// every session of the account ends. A disabled account stays disabled.
func (s *Service) ResetPassword(username, password string) (store.Account, error) {
	acct, err := s.accounts.AccountByUsername(strings.TrimSpace(username))
	if err != nil {
		if errors.Is(err, fault.ErrNotFound) {
			return store.Account{}, fault.NotFound("no account named %q", username)
		}
		return store.Account{}, err
	}
	if err := CheckPassword(password, acct.Username); err != nil {
		return store.Account{}, err
	}
	hash, err := HashPassword(password)
	if err != nil {
		return store.Account{}, err
	}
	now := s.now().UTC()
	acct, err = s.accounts.UpdateAccount(acct.ID, func(a *store.Account) error {
		a.PasswordHash, a.PasswordChosen, a.PasswordSetAt = hash, true, now
		a.SessionGen++
		return nil
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("reset password: %w", err)
	}
	s.log.Info("password reset on the server's machine", "username", acct.Username)
	return acct, nil
}

// EndSessions ends every session of account id (log out everywhere).
func (s *Service) EndSessions(id string) error {
	_, err := s.accounts.UpdateAccount(id, func(a *store.Account) error {
		a.SessionGen++
		return nil
	})
	return err
}
