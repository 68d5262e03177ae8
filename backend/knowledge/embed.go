package knowledge

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/security"
	"cubicle/backend/store"
)

// sealAAD binds a sealed embeddings key to its purpose (a model key cannot be swapped in).
var sealAAD = []byte("cubicle embeddings api key")

// EmbeddingsView is the embeddings setting as the settings page shows it: never the key.
type EmbeddingsView struct {
	BaseURL      string `json:"baseUrl"`
	Model        string `json:"model"`
	HasAPIKey    bool   `json:"hasApiKey"`
	AllowPrivate bool   `json:"allowPrivate"`
	// Configured: a base URL and a model are set, so retrieval re-ranks by vectors.
	Configured bool `json:"configured"`
}

// EmbeddingsUpdate changes the setting (an administrator's). An empty BaseURL turns vectors
// off (keyword retrieval only). A nil APIKey keeps the saved key while the base URL stays
// the one it was saved with; a new base URL drops it (a key only goes where it was saved
// for); "" clears it. AllowPrivate lets the URL be a loopback or private address (the rule of
// model endpoints); nil keeps the allowance while the base URL stays.
type EmbeddingsUpdate struct {
	BaseURL      string  `json:"baseUrl"`
	Model        string  `json:"model"`
	APIKey       *string `json:"apiKey,omitempty"`
	AllowPrivate *bool   `json:"allowPrivate,omitempty"`
}

// embedder is the embeddings endpoint in force, with its key opened.
type embedder struct {
	baseURL, model, key string
	allowPrivate        bool
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, errors.New("knowledge: a 32-byte Config.Key is required")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (s *Service) seal(key string) ([]byte, error) {
	if key == "" {
		return nil, nil
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, []byte(key), sealAAD), nil
}

func (s *Service) open(sealed []byte) (string, error) {
	if len(sealed) == 0 {
		return "", nil
	}
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", fault.Conflict("the saved embeddings API key is damaged; enter it again in Settings → Model")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], sealAAD)
	if err != nil {
		return "", fault.Conflict("the saved embeddings API key cannot be decrypted (the secrets directory changed?); enter it again in Settings → Model")
	}
	return string(plain), nil
}

// sameURL reports whether two base URLs name the same endpoint.
func sameURL(a, b string) bool {
	na, err1 := security.NormalizeEndpoint(a)
	nb, err2 := security.NormalizeEndpoint(b)
	if err1 != nil || err2 != nil {
		return strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
	}
	return na == nb
}

// Embeddings returns the embeddings setting.
func (s *Service) Embeddings() (EmbeddingsView, error) {
	e, err := s.cfg.Store.EmbeddingSettings()
	switch {
	case errors.Is(err, fault.ErrNotFound):
		return EmbeddingsView{}, nil
	case err != nil:
		return EmbeddingsView{}, fmt.Errorf("read the embeddings setting: %w", err)
	}
	has := len(e.APIKeySealed) > 0 && (e.KeyBaseURL == "" || sameURL(e.KeyBaseURL, e.BaseURL))
	return EmbeddingsView{BaseURL: e.BaseURL, Model: e.Model, HasAPIKey: has, AllowPrivate: e.AllowPrivate,
		Configured: e.BaseURL != "" && e.Model != ""}, nil
}

// SetEmbeddings validates and saves u; bad input is a fault.ErrInvalid error and changes
// nothing. Runs indexed before keep their vectors of the old model until a search embeds
// them again with the new one.
func (s *Service) SetEmbeddings(u EmbeddingsUpdate) (EmbeddingsView, error) {
	u.BaseURL, u.Model = strings.TrimSpace(u.BaseURL), strings.TrimSpace(u.Model)
	if u.BaseURL != "" {
		p, err := url.Parse(u.BaseURL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil {
			return EmbeddingsView{}, fault.Invalid("the embeddings base URL must be an http(s) URL such as https://api.openai.com/v1 (without user info)")
		}
		if u.Model == "" {
			return EmbeddingsView{}, fault.Invalid("name the embeddings model (for example text-embedding-3-small)")
		}
	}
	if len(u.Model) > 200 {
		return EmbeddingsView{}, fault.Invalid("the embeddings model name is too long (200 characters at most)")
	}
	s.setMu.Lock()
	defer s.setMu.Unlock()
	old, err := s.cfg.Store.EmbeddingSettings()
	if err != nil && !errors.Is(err, fault.ErrNotFound) {
		return EmbeddingsView{}, fmt.Errorf("read the embeddings setting: %w", err)
	}
	same := old.BaseURL != "" && sameURL(old.BaseURL, u.BaseURL) && (old.KeyBaseURL == "" || sameURL(old.KeyBaseURL, u.BaseURL))
	var sealed []byte
	switch {
	case u.APIKey != nil:
		if sealed, err = s.seal(*u.APIKey); err != nil {
			return EmbeddingsView{}, err
		}
	case same:
		sealed = old.APIKeySealed
	}
	allowPrivate := same && old.AllowPrivate
	if u.AllowPrivate != nil {
		allowPrivate = *u.AllowPrivate
	}
	e := store.EmbeddingSettings{BaseURL: u.BaseURL, Model: u.Model, APIKeySealed: sealed, AllowPrivate: allowPrivate, UpdatedAt: s.now().UTC()}
	if u.BaseURL == "" {
		e = store.EmbeddingSettings{UpdatedAt: e.UpdatedAt}
	}
	if len(e.APIKeySealed) > 0 {
		e.KeyBaseURL = e.BaseURL
	}
	if err := s.cfg.Store.PutEmbeddingSettings(e); err != nil {
		return EmbeddingsView{}, err
	}
	return s.Embeddings()
}

// embedderNow is the endpoint in force; ok is false when none is configured.
func (s *Service) embedderNow() (embedder, bool, error) {
	e, err := s.cfg.Store.EmbeddingSettings()
	switch {
	case errors.Is(err, fault.ErrNotFound):
		return embedder{}, false, nil
	case err != nil:
		return embedder{}, false, fmt.Errorf("read the embeddings setting: %w", err)
	case e.BaseURL == "" || e.Model == "":
		return embedder{}, false, nil
	}
	em := embedder{baseURL: e.BaseURL, model: e.Model, allowPrivate: e.AllowPrivate}
	if e.KeyBaseURL == "" || sameURL(e.KeyBaseURL, e.BaseURL) {
		if em.key, err = s.open(e.APIKeySealed); err != nil {
			return embedder{}, false, err
		}
	}
	return em, true, nil
}

// maxEmbedResponse bounds an embeddings answer.
const maxEmbedResponse = 64 << 20

// embed asks the endpoint for the vectors of texts (OpenAI-compatible POST /embeddings), in
// the order given. Errors say what failed and are of class fault.ErrUnavailable.
func (s *Service) embed(ctx context.Context, em embedder, texts []string) ([][]float32, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.EmbedTimeout)
	defer cancel()
	body, err := json.Marshal(map[string]any{"model": em.model, "input": texts})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(em.baseURL, "/")+"/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, fault.Unavailable("embeddings endpoint %s: %v", em.baseURL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if em.key != "" {
		req.Header.Set("Authorization", "Bearer "+em.key)
	}
	resp, err := s.cfg.HTTPClient(em.allowPrivate).Do(req)
	if err != nil {
		return nil, fault.Unavailable("embeddings endpoint %s: %v", em.baseURL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxEmbedResponse))
	if err != nil {
		return nil, fault.Unavailable("embeddings endpoint %s: read the answer: %v", em.baseURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(raw))
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return nil, fault.Unavailable("embeddings endpoint %s answered %s: %s", em.baseURL, resp.Status, msg)
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fault.Unavailable("embeddings endpoint %s: the answer is not an embeddings list: %v", em.baseURL, err)
	}
	if len(out.Data) != len(texts) {
		return nil, fault.Unavailable("embeddings endpoint %s returned %d vectors for %d texts", em.baseURL, len(out.Data), len(texts))
	}
	vecs := make([][]float32, len(texts))
	for i, d := range out.Data {
		at := d.Index
		if at < 0 || at >= len(texts) || vecs[at] != nil {
			at = i // some servers leave index out
		}
		if len(d.Embedding) == 0 {
			return nil, fault.Unavailable("embeddings endpoint %s returned an empty vector", em.baseURL)
		}
		vecs[at] = normalize(d.Embedding)
	}
	for _, v := range vecs {
		if v == nil {
			return nil, fault.Unavailable("embeddings endpoint %s returned vectors with duplicate indexes", em.baseURL)
		}
	}
	return vecs, nil
}

// normalize scales v to unit length (a zero vector stays zero), so a dot product is the cosine.
func normalize(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	if sum == 0 {
		return out
	}
	n := math.Sqrt(sum)
	for i, x := range v {
		out[i] = float32(float64(x) / n)
	}
	return out
}

// cosine of two unit vectors (0 when their lengths differ: vectors of different models).
func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var d float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
	}
	return d
}

func encodeVector(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

func decodeVector(b []byte) []float32 {
	if len(b)%4 != 0 {
		return nil
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// embedTimeout is the default bound of one embeddings call.
const embedTimeout = 30 * time.Second
