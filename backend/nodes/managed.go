package nodes

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// sealAAD binds a sealed local runner secret to its purpose.
var sealAAD = []byte("cubicle managed local runner token")

// LocalCredential returns the managed local runner's token ("local.<secret>"), creating it on
// first start: the registry keeps the secret's SHA-256 like any runner's, and the secret
// itself sealed with AES-256-GCM under key (32 bytes from the data directory's secrets), so
// the data file alone does not reveal it. A sealed secret that no longer opens (the secrets
// directory was replaced) is replaced by a new one: the server holds both ends.
func (h *Hub) LocalCredential(key []byte) (string, error) {
	if len(key) < 32 {
		return "", errors.New("nodes: the local runner's sealing key must have 32 bytes")
	}
	block, err := aes.NewCipher(key[:32])
	if err != nil {
		return "", err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return "", err
	}
	rec, err := h.cfg.Store.Runner(LocalID)
	switch {
	case err == nil:
		if sec, ok := openSecret(aead, rec); ok {
			return LocalID + "." + sec, nil
		}
		h.log.Warn("the managed local runner's credential could not be opened (secrets replaced?); making a new one")
	case !errors.Is(err, fault.ErrNotFound):
		return "", fmt.Errorf("local runner credential: %w", err)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	sec := base64.RawURLEncoding.EncodeToString(raw)
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	sealed := aead.Seal(nonce, nonce, []byte(sec), sealAAD)
	sum := sha256.Sum256([]byte(sec))
	set := func(r *store.Runner) error {
		r.Name, r.Managed, r.TokenHash, r.SecretSealed = "this computer", true, sum[:], sealed
		r.Revoked, r.RevokedAt = false, time.Time{}
		return nil
	}
	if err == nil {
		_, err = h.cfg.Store.UpdateRunner(LocalID, set)
	} else {
		r := store.Runner{ID: LocalID, CreatedAt: time.Now().UTC()}
		set(&r)
		err = h.cfg.Store.CreateRunner(r)
	}
	if err != nil {
		return "", fmt.Errorf("store the local runner credential: %w", err)
	}
	h.log.Info("managed local runner credential created")
	return LocalID + "." + sec, nil
}

// openSecret opens rec's sealed secret and checks it against its hash.
func openSecret(aead cipher.AEAD, rec store.Runner) (string, bool) {
	n := aead.NonceSize()
	if !rec.Managed || len(rec.SecretSealed) < n {
		return "", false
	}
	plain, err := aead.Open(nil, rec.SecretSealed[:n], rec.SecretSealed[n:], sealAAD)
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(plain)
	if subtle.ConstantTimeCompare(sum[:], rec.TokenHash) != 1 {
		return "", false
	}
	return string(plain), true
}
