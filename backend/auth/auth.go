// Package auth owns who may use Cubicle: accounts with roles (admin, member), salted password
// hashes (bcrypt) that pass a strength check, HMAC-signed session tokens with an expiry, the
// admin account created on first start, the login rate limit, and the per-launch token of the
// desktop app's local admin.
//
// A session token is "v1.<payload>.<mac>", both parts base64url: the payload is JSON
// {account id, role, expiry, nonce, session generation}, the MAC is HMAC-SHA256 over
// "v1."+payload with a 32-byte key kept in a 0600 file in the data directory. Tokens survive a
// restart (same key) and expire. Ending sessions survives a restart too, because both ways of
// ending them live in the store: logging out records the token's nonce as revoked, and a
// password change or disabling the account bumps the account's session generation, which
// every older token of that account no longer matches. The account is read on every check, so
// its current role counts (not the one in the token) and a deleted account's tokens stop
// working.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/text/secure/precis"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Accounts is the part of the store auth needs.
type Accounts interface {
	Account(id string) (store.Account, error)
	AccountByUsername(name string) (store.Account, error)
	Accounts() ([]store.Account, error)
	CreateAccount(a store.Account) error
	UpdateAccount(id string, fn func(*store.Account) error) (store.Account, error)
	DeleteAccount(id string) error
	RevokeSession(nonce string, exp, now time.Time) error
	SessionRevoked(nonce string) (bool, error)
}

// Principal is an authenticated caller.
type Principal struct {
	AccountID string
	Username  string
	Role      store.Role
	Token     string // the token that authenticated the call
	Expires   time.Time
}

// Admin reports whether the caller may change app settings.
func (p Principal) Admin() bool { return p.Role == store.RoleAdmin }

// Config configures a Service. Accounts and Key are required.
type Config struct {
	Accounts Accounts
	Key      []byte        // HMAC key, at least 32 bytes (see LoadOrCreateKey)
	TTL      time.Duration // session lifetime; default 7 days
	Logger   *slog.Logger
	Now      func() time.Time // default time.Now
	// Limits of failed logins; zero fields take DefaultLoginLimits.
	Limits LoginLimits
}

// Service logs people in, checks their tokens and manages accounts. It is safe for
// concurrent use.
type Service struct {
	accounts Accounts
	key      []byte
	ttl      time.Duration
	log      *slog.Logger
	now      func() time.Time
	limiter  *limiter
	// compare checks a password against a hash (bcrypt; tests count the calls).
	compare func(hash, password []byte) error
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Accounts == nil {
		return nil, errors.New("auth: Config.Accounts is required")
	}
	if len(cfg.Key) < 32 {
		return nil, errors.New("auth: Config.Key must hold at least 32 bytes")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 7 * 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{accounts: cfg.Accounts, key: cfg.Key, ttl: cfg.TTL, log: cfg.Logger, now: cfg.Now,
		limiter: newLimiter(cfg.Limits, cfg.Now), compare: bcrypt.CompareHashAndPassword}, nil
}

// HashPassword returns a salted bcrypt hash of password. It checks only the length bcrypt
// can take (8 to 72 bytes); CheckPassword is the strength check every chosen password passes.
func HashPassword(password string) (string, error) {
	if len(password) < 8 {
		return "", fault.Invalid("the password must have at least 8 characters")
	}
	if len(password) > 72 {
		return "", fault.Invalid("the password must have at most 72 bytes")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), hashCost)
	if err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	return string(h), nil
}

// Login checks a username and password from client (its network address, for the rate limit)
// and returns a new session token. The attempt is counted against the account and the client
// before the password is checked, so parallel guesses cannot outrun the limit: past it, Login
// answers fault.ErrTooMany without checking anything. A disabled account is refused (after a
// correct password only, so the answer does not tell whether an account exists).
func (s *Service) Login(username, password, client string) (Principal, error) {
	return s.LoginFrom(username, password, client, "")
}

// LoginFrom is Login from a client that may send the device token (DeviceToken) it was given
// when it last logged in to the account: such a known device is limited by its own failures
// only, so that others' guesses at the account do not lock it out. A token that is not valid
// for the username counts as none.
func (s *Service) LoginFrom(username, password, client, device string) (Principal, error) {
	username = strings.TrimSpace(username)
	if norm, err := precis.UsernameCasePreserved.String(username); err == nil {
		username = norm // the form names are stored in (full-width letters typed, a decomposed é)
	}
	done, err := s.limiter.begin(username, client, s.deviceOf(device, username))
	if err != nil {
		return Principal{}, err
	}
	p, err := s.login(username, password)
	done(err == nil)
	return p, err
}

// DeviceToken returns a new device token for a client that just logged in as username: sent
// back with later logins (LoginFrom), it marks the client as one of the account's known
// devices. It grants nothing else — it is no session, and is signed apart from sessions.
func (s *Service) DeviceToken(username string) (string, error) {
	nonce := make([]byte, 12)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("device token: %w", err)
	}
	body := "d1." + base64.RawURLEncoding.EncodeToString([]byte(strings.ToLower(username))) + "." + hex.EncodeToString(nonce)
	return body + "." + base64.RawURLEncoding.EncodeToString(s.mac("device:"+body)), nil
}

// deviceOf returns the device id a device token names when it is valid for username, else "".
func (s *Service) deviceOf(token, username string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != "d1" {
		return ""
	}
	body := strings.Join(parts[:3], ".")
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || !hmac.Equal(sig, s.mac("device:"+body)) {
		return ""
	}
	user, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || string(user) != strings.ToLower(strings.TrimSpace(username)) {
		return ""
	}
	return parts[2]
}

func (s *Service) login(username, password string) (Principal, error) {
	wrong := fault.New(fault.ErrUnauthenticated, "wrong username or password")
	acct, err := s.accounts.AccountByUsername(username)
	if err != nil {
		if errors.Is(err, fault.ErrNotFound) {
			_ = s.compare(dummyHash, []byte(password))
			return Principal{}, wrong
		}
		return Principal{}, fmt.Errorf("login: %w", err)
	}
	if s.compare([]byte(acct.PasswordHash), []byte(password)) != nil {
		return Principal{}, wrong
	}
	if acct.Disabled {
		return Principal{}, fault.Forbidden("the account %s is disabled; ask an administrator to enable it", acct.Username)
	}
	return s.Issue(acct)
}

// Issue returns a fresh session for acct without a password check (the desktop app's local
// admin, tests).
func (s *Service) Issue(acct store.Account) (Principal, error) {
	nonce := make([]byte, 12)
	if _, err := rand.Read(nonce); err != nil {
		return Principal{}, fmt.Errorf("issue session: %w", err)
	}
	exp := s.now().Add(s.ttl).Truncate(time.Second)
	c := claims{Account: acct.ID, Role: acct.Role, Exp: exp.Unix(), Nonce: hex.EncodeToString(nonce), Gen: acct.SessionGen}
	payload, err := json.Marshal(c)
	if err != nil {
		return Principal{}, fmt.Errorf("issue session: %w", err)
	}
	body := "v1." + base64.RawURLEncoding.EncodeToString(payload)
	tok := body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body))
	return Principal{AccountID: acct.ID, Username: acct.Username, Role: acct.Role, Token: tok, Expires: exp}, nil
}

type claims struct {
	Account string     `json:"a"`
	Role    store.Role `json:"r"`
	Exp     int64      `json:"e"`
	Nonce   string     `json:"n"`
	Gen     uint64     `json:"g,omitempty"`
}

func (s *Service) mac(body string) []byte {
	m := hmac.New(sha256.New, s.key)
	io.WriteString(m, body)
	return m.Sum(nil)
}

// Authenticate checks a token and returns who it belongs to. Every failure is
// fault.ErrUnauthenticated: a bad, expired or revoked token, a token of an account that was
// deleted or disabled or whose sessions were ended since (its session generation moved on).
func (s *Service) Authenticate(token string) (Principal, error) {
	c, err := s.parse(token)
	if err != nil {
		return Principal{}, err
	}
	revoked, err := s.accounts.SessionRevoked(c.Nonce)
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	if revoked {
		return Principal{}, fault.New(fault.ErrUnauthenticated, "this session was logged out; log in again")
	}
	acct, err := s.accounts.Account(c.Account)
	if err != nil {
		if errors.Is(err, fault.ErrNotFound) {
			return Principal{}, fault.New(fault.ErrUnauthenticated, "your account no longer exists; log in again")
		}
		return Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	switch {
	case acct.Disabled:
		return Principal{}, fault.New(fault.ErrUnauthenticated, "your account was disabled by an administrator")
	case acct.SessionGen != c.Gen:
		return Principal{}, fault.New(fault.ErrUnauthenticated, "your sessions were ended (password changed or signed out everywhere); log in again")
	}
	return Principal{AccountID: acct.ID, Username: acct.Username, Role: acct.Role, Token: token, Expires: time.Unix(c.Exp, 0)}, nil
}

func (s *Service) parse(token string) (claims, error) {
	bad := fault.New(fault.ErrUnauthenticated, "not logged in or the session expired; log in again")
	if len(token) > 1024 || !strings.HasPrefix(token, "v1.") {
		return claims{}, bad
	}
	i := strings.LastIndexByte(token, '.')
	body, sig := token[:i], token[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(body)) {
		return claims{}, bad
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(body, "v1."))
	if err != nil {
		return claims{}, bad
	}
	var c claims
	if json.Unmarshal(payload, &c) != nil || c.Account == "" || c.Nonce == "" {
		return claims{}, bad
	}
	if s.now().Unix() >= c.Exp {
		return claims{}, bad
	}
	return c, nil
}

// Revoke ends a token before its expiry (log out); the revocation is stored, so it survives a
// restart. Unknown or invalid tokens are ignored.
func (s *Service) Revoke(token string) error {
	c, err := s.parse(token)
	if err != nil {
		return nil
	}
	if err := s.accounts.RevokeSession(c.Nonce, time.Unix(c.Exp, 0), s.now()); err != nil {
		return fmt.Errorf("log out: %w", err)
	}
	return nil
}

// LoadOrCreateKey reads the HMAC key at path, creating a random one (file 0600, directory 0700)
// when it does not exist yet.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err == nil {
		if len(key) < 32 {
			return nil, fault.Conflict("the session key %s is damaged (shorter than 32 bytes); delete it to make a new one (everyone must log in again)", path)
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read session key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create secrets dir: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("make session key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) { // another process won the race
			return LoadOrCreateKey(path)
		}
		return nil, fmt.Errorf("write session key: %w", err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, fmt.Errorf("write session key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write session key: %w", err)
	}
	return key, nil
}
