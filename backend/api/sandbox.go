package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Sandbox is the review of what the host sandbox refused and its widenings (Settings →
// Security → host sandbox, docs/sandbox.md).
type Sandbox interface {
	SandboxReview(ctx context.Context) (SandboxReview, error)
	// ApproveWidening widens the sandbox of refusal id's node so that the refused access is
	// allowed (scope "path" or "directory" for a write); never for Cubicle's data or the
	// protected paths (fault.ErrForbidden, nothing changed).
	ApproveWidening(ctx context.Context, by, id, scope string) (Widening, error)
	// RevokeWidening takes a widening back (fault.ErrNotFound when it is not in force).
	RevokeWidening(ctx context.Context, by string, w Widening) error
}

// SandboxReview is what Settings shows: the refusals, the latest first, and the widenings.
type SandboxReview struct {
	Refusals  []SandboxRefusal `json:"refusals"`
	Widenings []Widening       `json:"widenings"`
}

// SandboxRefusal is a recorded refusal with the names of its node, account and agent;
// Widened says a widening now allows it.
type SandboxRefusal struct {
	store.SandboxRefusal
	NodeName    string `json:"nodeName"`
	AccountName string `json:"accountName,omitempty"`
	AgentName   string `json:"agentName,omitempty"`
	Widened     bool   `json:"widened"`
}

// The accesses a widening grants.
const (
	AccessRead      = "read"
	AccessReadWrite = "read-write"
)

// Widening is a path of a node's host sandbox opened by an administrator: a credential folder
// readable (read) or a path writable (read-write).
type Widening struct {
	Node   string `json:"node"`
	Path   string `json:"path"`
	Access string `json:"access"`
}

func (s *Server) sandboxRoutes(mux *router) {
	mux.Handle("GET /api/app/admin/sandbox", s.admin(s.needSandbox(s.getSandbox)))
	mux.Handle("POST /api/app/admin/sandbox/refusals/{id}/approve", s.admin(s.needSandbox(s.approveWidening)))
	mux.Handle("POST /api/app/admin/sandbox/revoke", s.admin(s.needSandbox(s.revokeWidening)))
}

func (s *Server) needSandbox(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Sandbox == nil {
			writeError(w, r, s.log, fault.Unavailable("the host sandbox's review is not available in this mode"))
			return
		}
		h(w, r)
	}
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	v, err := s.cfg.Sandbox.SandboxReview(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// approveWidening answers the widening made and the review as it now is.
func (s *Server) approveWidening(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Scope string `json:"scope"`
	}
	if r.ContentLength != 0 {
		if err := decodeStrict(r, &body, `{"scope": "path" | "directory"}`); err != nil {
			writeError(w, r, s.log, err)
			return
		}
	}
	wd, err := s.cfg.Sandbox.ApproveWidening(r.Context(), principal(r).AccountID, r.PathValue("id"), strings.TrimSpace(body.Scope))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.sandboxAnswer(w, r, wd)
}

func (s *Server) revokeWidening(w http.ResponseWriter, r *http.Request) {
	var wd Widening
	if err := decodeStrict(r, &wd, `{"node": "local", "path": "/abs/path", "access": "read" | "read-write"}`); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	switch {
	case strings.TrimSpace(wd.Node) == "":
		writeError(w, r, s.log, fault.Invalid("node is required (\"local\" is this server's own)"))
		return
	case !filepath.IsAbs(wd.Path):
		writeError(w, r, s.log, fault.Invalid("path %q must be absolute, as the widening lists it", wd.Path))
		return
	case wd.Access != AccessRead && wd.Access != AccessReadWrite:
		writeError(w, r, s.log, fault.Invalid("access %q: use %q or %q", wd.Access, AccessRead, AccessReadWrite))
		return
	}
	if err := s.cfg.Sandbox.RevokeWidening(r.Context(), principal(r).AccountID, wd); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.sandboxAnswer(w, r, wd)
}

// decodeStrict is decode that refuses fields the call does not know (a widening is taken
// exactly as written or not at all); shape says what to send.
func decodeStrict(r *http.Request, v any, shape string) error {
	body := http.MaxBytesReader(nil, r.Body, BodyLimit(r.URL.Path))
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fault.Invalid("the request body is not valid for this call (%v): send %s", err, shape)
	}
	io.Copy(io.Discard, body)
	return nil
}

// sandboxAnswer writes {widening, review}.
func (s *Server) sandboxAnswer(w http.ResponseWriter, r *http.Request, wd Widening) {
	v, err := s.cfg.Sandbox.SandboxReview(r.Context())
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Widening Widening `json:"widening"`
		SandboxReview
	}{wd, v})
}
