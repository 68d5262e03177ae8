// Package sandboxreview keeps what the host sandbox refused host tools (host_shell, the host
// file tools, stdio MCP servers that run on the server), for an administrator to review, and
// turns a refusal the administrator approves into a widening of its node's sandbox (issue 26,
// docs/sandbox.md "Widening"). Widenings are per node, like the rest of the host sandbox's
// settings: who may run host tools on a node at all is the account's host grant (hostaccess),
// what those tools may touch there is the node's.
package sandboxreview

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/api"
	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/sandbox"
	"cubicle/backend/store"
)

// Store keeps the refusals and names their accounts and agents (the store implements it).
type Store interface {
	UpdateSandboxRefusals(fn func([]store.SandboxRefusal) ([]store.SandboxRefusal, error)) error
	SandboxRefusals() ([]store.SandboxRefusal, error)
	Account(id string) (store.Account, error)
	Agent(id string) (store.Agent, error)
}

// Settings are the nodes' host sandbox settings (security.Service gives them).
type Settings interface {
	HostSandbox(node string) store.HostSandbox
	HostSandboxes() map[string]store.HostSandbox
	WidenHostSandbox(by, node, path string, write, revoke bool) (store.HostSandbox, error)
}

// Runner is what the review asks of a runner's node: the paths that are its own data.
type Runner interface {
	Label() string
	HostProtected(ctx context.Context) ([]string, error)
}

// Config configures a Review; every field but Logger is required.
type Config struct {
	Store    Store
	Settings Settings
	// DataDir is this server's data directory: never widened on node local.
	DataDir string
	// Label names a node for people.
	Label func(node string) string
	// Runner finds a runner's node (fault.ErrNotFound when there is none).
	Runner func(node string) (Runner, error)
	// Protected is what the host file guard in force protects on a host whose runner user's
	// home is home, as absolute paths: never widened.
	Protected func(home string) []string
	Logger    *slog.Logger
}

// Review records the host sandbox's refusals (tools.RefusalRecorder) and is the admin API's
// review of them and their widenings (api.Sandbox).
type Review struct {
	cfg Config
	log *slog.Logger
}

// New returns a Review.
func New(cfg Config) (*Review, error) {
	if cfg.Store == nil || cfg.Settings == nil || cfg.DataDir == "" || cfg.Label == nil || cfg.Runner == nil || cfg.Protected == nil {
		return nil, errors.New("sandboxreview: Config.Store, Settings, DataDir, Label, Runner and Protected are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Review{cfg: cfg, log: log}, nil
}

// MaxRefusals is how many distinct refusals are kept (the latest).
const MaxRefusals = 200

// SandboxRefused records rs, refused a command of turn t on node (runner user's home home): a
// refusal already recorded for the same node, account, agent, path and access is counted
// again. Refusals that name no path are left out (there is nothing to widen).
func (s *Review) SandboxRefused(t agent.TurnInfo, node, home string, rs []sandbox.Refusal) {
	if node == "" {
		node = nodes.LocalID
	}
	now := time.Now().UTC()
	err := s.cfg.Store.UpdateSandboxRefusals(func(cur []store.SandboxRefusal) ([]store.SandboxRefusal, error) {
		for _, r := range rs {
			if r.Path == "" {
				continue
			}
			i := slices.IndexFunc(cur, func(c store.SandboxRefusal) bool {
				return c.Node == node && c.AccountID == t.UserID && c.AgentID == t.AgentID && c.Path == r.Path && c.Write == r.Write
			})
			if i >= 0 {
				cur[i].At, cur[i].Count, cur[i].Line, cur[i].Hidden, cur[i].SessionID = now, cur[i].Count+1, r.Line, r.Hidden, t.SessionID
				continue
			}
			cur = append(cur, store.SandboxRefusal{ID: newRefusalID(), Node: node, Home: home, AccountID: t.UserID, AgentID: t.AgentID,
				SessionID: t.SessionID, Path: r.Path, Write: r.Write, Hidden: r.Hidden, Line: r.Line, First: now, At: now, Count: 1})
		}
		slices.SortStableFunc(cur, func(x, y store.SandboxRefusal) int { return y.At.Compare(x.At) })
		if len(cur) > MaxRefusals {
			cur = cur[:MaxRefusals]
		}
		return cur, nil
	})
	if err != nil {
		s.log.Error("recording a host sandbox refusal", "node", node, "agent", t.AgentID, "err", err)
	}
}

func newRefusalID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SandboxReview lists the recorded refusals, the latest first, with the names of their
// node, account and agent and whether a widening now covers them, and the widenings in force.
func (s *Review) SandboxReview(ctx context.Context) (api.SandboxReview, error) {
	rs, err := s.cfg.Store.SandboxRefusals()
	if err != nil {
		return api.SandboxReview{}, err
	}
	out := api.SandboxReview{Refusals: []api.SandboxRefusal{}, Widenings: []api.Widening{}}
	names := map[string]string{}
	name := func(kind, id string, look func() (string, error)) string {
		if id == "" {
			return ""
		}
		if n, ok := names[kind+id]; ok {
			return n
		}
		n, err := look()
		if err != nil {
			n = ""
		}
		names[kind+id] = n
		return n
	}
	for _, r := range rs {
		set := s.cfg.Settings.HostSandbox(r.Node)
		v := api.SandboxRefusal{SandboxRefusal: r, NodeName: s.cfg.Label(r.Node),
			AccountName: name("a", r.AccountID, func() (string, error) { a, err := s.cfg.Store.Account(r.AccountID); return a.Username, err }),
			AgentName:   name("g", r.AgentID, func() (string, error) { a, err := s.cfg.Store.Agent(r.AgentID); return a.Name, err })}
		if r.Write {
			v.Widened = slices.ContainsFunc(set.ReadWrite, func(d string) bool { return sandbox.Within(r.Path, d) })
		} else {
			v.Widened = slices.ContainsFunc(set.Read, func(d string) bool { return sandbox.Within(r.Path, d) })
		}
		out.Refusals = append(out.Refusals, v)
	}
	for node, set := range s.cfg.Settings.HostSandboxes() {
		for _, p := range set.Read {
			out.Widenings = append(out.Widenings, api.Widening{Node: node, Path: p, Access: api.AccessRead})
		}
		for _, p := range set.ReadWrite {
			out.Widenings = append(out.Widenings, api.Widening{Node: node, Path: p, Access: api.AccessReadWrite})
		}
	}
	slices.SortFunc(out.Widenings, func(x, y api.Widening) int { return cmp.Or(cmp.Compare(x.Node, y.Node), cmp.Compare(x.Path, y.Path)) })
	return out, nil
}

// ApproveWidening turns refusal id into a widening of its node's sandbox (by is the
// administrator): a refused write makes the path (scope "path") or its directory (scope
// "directory", the default) writable; a refused read opens the credential folder of the
// node's home that hid it. Cubicle's data directory (the server's, a runner's), its secrets
// and the protected paths of Settings → Security are never widened: fault.ErrForbidden says
// why, and nothing changes.
func (s *Review) ApproveWidening(ctx context.Context, by, id, scope string) (api.Widening, error) {
	switch scope {
	case "", "path", "directory":
	default:
		return api.Widening{}, fault.Invalid("scope %q: use \"path\" (the refused path itself) or \"directory\" (its directory)", scope)
	}
	rs, err := s.cfg.Store.SandboxRefusals()
	if err != nil {
		return api.Widening{}, err
	}
	i := slices.IndexFunc(rs, func(r store.SandboxRefusal) bool { return r.ID == id })
	if i < 0 {
		return api.Widening{}, fault.NotFound("sandbox refusal %q not found (the list keeps the latest %d)", id, MaxRefusals)
	}
	r := rs[i]
	never, err := s.neverWidened(ctx, r.Node, r.Home)
	if err != nil {
		return api.Widening{}, err
	}
	w := api.Widening{Node: r.Node, Path: r.Path, Access: api.AccessReadWrite}
	if !r.Write {
		w.Access = api.AccessRead
		w.Path = ""
		for _, c := range sandbox.HomeSecrets(r.Home) {
			if sandbox.Within(r.Path, c) {
				w.Path = c
			}
		}
	} else if scope != "path" {
		w.Path = filepath.Dir(r.Path)
	}
	for _, n := range never {
		if sandbox.Within(r.Path, n.path) || w.Path != "" && sandbox.Within(w.Path, n.path) {
			return api.Widening{}, fault.Forbidden("%s is %s (%s): host commands never get access to it", r.Path, n.what, n.path)
		}
	}
	set := s.cfg.Settings.HostSandbox(r.Node)
	switch {
	case w.Path == "":
		return api.Widening{}, fault.Conflict("%s is not hidden from host commands, so the sandbox did not refuse reading it (the file's own permissions did): "+
			"a widening opens only the credential folders of the home (~/.ssh, ~/.kube, …)", r.Path)
	case w.Access == api.AccessReadWrite:
		for _, c := range sandbox.HomeSecrets(r.Home) {
			if sandbox.Within(w.Path, c) && !slices.Contains(set.Read, c) {
				return api.Widening{}, fault.Forbidden("%s is in the credential folder %s, which host commands cannot even read: approve reading it first", w.Path, c)
			}
		}
	}
	write := w.Access == api.AccessReadWrite
	if _, err := s.cfg.Settings.WidenHostSandbox(by, r.Node, w.Path, write, false); err != nil {
		return api.Widening{}, err
	}
	s.log.Info("host sandbox widened", "by", by, "node", w.Node, "path", w.Path, "access", w.Access, "refusal", id)
	return w, nil
}

// RevokeWidening takes widening w back (fault.ErrNotFound when it is not in force).
func (s *Review) RevokeWidening(ctx context.Context, by string, w api.Widening) error {
	if _, err := s.cfg.Settings.WidenHostSandbox(by, w.Node, filepath.Clean(w.Path), w.Access == api.AccessReadWrite, true); err != nil {
		return err
	}
	s.log.Info("host sandbox widening revoked", "by", by, "node", w.Node, "path", w.Path, "access", w.Access)
	return nil
}

// neverPath is a path no widening reaches, and what it is.
type neverPath struct{ path, what string }

// neverWidened are the paths of node (its runner user's home is home) no widening may reach:
// Cubicle's data directory there (a runner's is asked over its link, so it must be connected)
// and the protected paths of Settings → Security.
func (s *Review) neverWidened(ctx context.Context, node, home string) ([]neverPath, error) {
	var out []neverPath
	if node == nodes.LocalID {
		out = append(out, neverPath{s.cfg.DataDir, "Cubicle's data directory with its secrets"})
	} else {
		r, err := s.cfg.Runner(node)
		if err != nil {
			return nil, err
		}
		own, err := r.HostProtected(ctx)
		if err != nil {
			return nil, fault.Unavailable("%s cannot say which of its paths are its own data (%v): approve when it is connected", r.Label(), err)
		}
		for _, p := range own {
			out = append(out, neverPath{p, "the runner's own data directory with its token"})
		}
	}
	for _, p := range s.cfg.Protected(home) {
		out = append(out, neverPath{p, "a protected path (Settings → Security → protected paths; take it out there first if host commands should reach it)"})
	}
	return out, nil
}

var _ api.Sandbox = (*Review)(nil)
