package auth

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Bootstrap describes the first-start admin.
type Bootstrap struct {
	Username string // default "admin"
	Password string // "" = generate one
}

// BootstrapResult says what EnsureAdmin did.
type BootstrapResult struct {
	Created   bool
	Username  string
	Password  string // set only when Created and the password was generated: show it once
	Generated bool
}

// EnsureAdmin creates the admin account when no account exists yet. Later starts change
// nothing (the environment variables only seed the first start).
func (s *Service) EnsureAdmin(b Bootstrap) (BootstrapResult, error) {
	accts, err := s.accounts.Accounts()
	if err != nil {
		return BootstrapResult{}, fmt.Errorf("bootstrap admin: %w", err)
	}
	for _, a := range accts {
		if a.Role == store.RoleAdmin {
			return BootstrapResult{Username: a.Username}, nil
		}
	}
	user := strings.TrimSpace(b.Username)
	if user == "" {
		user = "admin"
	}
	res := BootstrapResult{Created: true, Username: user}
	pw := b.Password
	if pw == "" {
		if pw, err = generatePassword(20); err != nil {
			return BootstrapResult{}, fmt.Errorf("bootstrap admin: %w", err)
		}
		res.Password, res.Generated = pw, true
	}
	hash, err := HashPassword(pw)
	if err != nil {
		return BootstrapResult{}, fmt.Errorf("bootstrap admin (CUBICLE_ADMIN_PASSWORD): %w", err)
	}
	id, err := NewID()
	if err != nil {
		return BootstrapResult{}, err
	}
	now := s.now().UTC()
	// A generated password is never "chosen": only the console saw it. A given one is chosen
	// when it passes the strength check (a weaker one still works on loopback).
	chosen := !res.Generated && CheckPassword(pw, user) == nil
	acct := store.Account{ID: id, Username: user, PasswordHash: hash, Role: store.RoleAdmin, CreatedAt: now,
		PasswordChosen: chosen, PasswordSetAt: now}
	if err := s.accounts.CreateAccount(acct); err != nil {
		return BootstrapResult{}, fmt.Errorf("bootstrap admin: %w", err)
	}
	s.log.Info("created admin account", "username", user, "generatedPassword", res.Generated)
	return res, nil
}

// Admin returns the first enabled admin account (the desktop app's local user).
func (s *Service) Admin() (store.Account, error) {
	accts, err := s.accounts.Accounts()
	if err != nil {
		return store.Account{}, fmt.Errorf("find admin: %w", err)
	}
	for _, a := range accts {
		if a.Role == store.RoleAdmin && !a.Disabled {
			return a, nil
		}
	}
	return store.Account{}, fault.NotFound("no enabled admin account exists")
}

// NetworkReady returns nil when the server may face a network: an enabled administrator has
// a password a person chose that passed the strength check. Otherwise it returns a
// fault.ErrForbidden error saying how to set one — also when the data directory was first
// started on loopback with a generated password (only that console ever saw it).
func (s *Service) NetworkReady() error {
	accts, err := s.accounts.Accounts()
	if err != nil {
		return fmt.Errorf("check the admin password: %w", err)
	}
	var admin string
	for _, a := range accts {
		if a.Role != store.RoleAdmin || a.Disabled {
			continue
		}
		if a.PasswordChosen {
			return nil
		}
		if admin == "" {
			admin = a.Username
		}
	}
	if admin == "" {
		return fault.Forbidden("no admin account exists yet; set CUBICLE_ADMIN_USER and a strong CUBICLE_ADMIN_PASSWORD for the first start")
	}
	return fault.Forbidden("the password of admin %q was generated at first start (or is too weak) and may not face a network: "+
		"choose a strong one with `cubicle admin reset-password %s` on this machine (or change it under Account while "+
		"serving on 127.0.0.1), then start again", admin, admin)
}

const passwordAlphabet = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"

func generatePassword(n int) (string, error) {
	var b strings.Builder
	max := big.NewInt(int64(len(passwordAlphabet)))
	for range n {
		i, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		b.WriteByte(passwordAlphabet[i.Int64()])
	}
	return b.String(), nil
}

// NewID returns a random 128-bit id as 32 hex characters.
func NewID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return fmt.Sprintf("%x", b), nil
}
