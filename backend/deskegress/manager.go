package deskegress

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Desktop is a running desktop whose egress is enforced.
type Desktop struct {
	InstanceID string
	AgentID    string // "" for a shared desktop
	AccountID  string
	PID        int // a process of the desktop on this machine (its network namespace is used)
}

// Blocked is one refused connection or name.
type Blocked struct {
	InstanceID  string
	AgentID     string
	AccountID   string
	Destination string // the address refused, or the name whose query was refused (Proto "dns")
	Port        int    // TCP/UDP destination port; 0 for other protocols and names
	Proto       string // "tcp", "udp", "icmp", "other" or "dns"
	Time        time.Time
}

// Summary is what Recent reports for one refused destination of one agent.
type Summary struct {
	AgentID     string    `json:"agentId,omitempty"`
	InstanceID  string    `json:"instanceId"`
	Destination string    `json:"destination"`
	Port        int       `json:"port,omitempty"`
	Proto       string    `json:"proto"`
	Count       int       `json:"count"`
	Last        time.Time `json:"last"`
}

// maxRecent bounds the refused destinations Recent remembers.
const maxRecent = 500

// Config configures a Manager.
type Config struct {
	Logger *slog.Logger
	// Lookup resolves allowed names for the DNS filter; nil = this machine's resolver.
	Lookup LookupFunc
	// OnBlocked hears every refused connection and name. It must return quickly.
	OnBlocked func(Blocked)
}

// Manager enforces the egress policies of the desktops of this machine; it owns, per desktop
// with a policy other than open, the DNS filter and the reader of refused packets.
type Manager struct {
	cfg    Config
	mu     sync.Mutex
	desks  map[string]*enforced // by instance id
	recent map[summaryKey]*Summary
	closed bool
}

type summaryKey struct{ agent, instance, dest, proto string }

// New returns a Manager.
func New(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Lookup == nil {
		cfg.Lookup = net.DefaultResolver.LookupNetIP
	}
	return &Manager{cfg: cfg, desks: map[string]*enforced{}, recent: map[summaryKey]*Summary{}}
}

// Enforced lists the desktops whose policy is enforced now (not open).
func (m *Manager) Enforced() []Desktop {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Desktop, 0, len(m.desks))
	for _, e := range m.desks {
		out = append(out, e.desk)
	}
	return out
}

// Release stops enforcing instance's policy (its desktop stopped): the DNS filter and the
// packet reader stop and let go of the desktop's network namespace.
func (m *Manager) Release(instanceID string) {
	m.mu.Lock()
	e := m.desks[instanceID]
	delete(m.desks, instanceID)
	m.mu.Unlock()
	if e != nil {
		e.close()
	}
}

// Close releases every desktop.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	ds := m.desks
	m.desks = map[string]*enforced{}
	m.mu.Unlock()
	for _, e := range ds {
		e.close()
	}
	return nil
}

// Recent lists the refused destinations seen since this process started, the latest first.
func (m *Manager) Recent() []Summary {
	m.mu.Lock()
	out := make([]Summary, 0, len(m.recent))
	for _, s := range m.recent {
		out = append(out, *s)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Summary) int {
		return cmp.Or(b.Last.Compare(a.Last), cmp.Compare(a.Destination, b.Destination))
	})
	return out
}

// Note records b, a refusal enforced elsewhere (a runner's desktop), for Recent, and hands it
// to Config.OnBlocked.
func (m *Manager) Note(b Blocked) { m.blocked(b) }

// blocked records b and hands it on.
func (m *Manager) blocked(b Blocked) {
	k := summaryKey{b.AgentID, b.InstanceID, b.Destination, b.Proto}
	m.mu.Lock()
	s := m.recent[k]
	if s == nil {
		if len(m.recent) >= maxRecent {
			var oldest summaryKey
			first := true
			for k, v := range m.recent {
				if first || v.Last.Before(m.recent[oldest].Last) {
					oldest, first = k, false
				}
			}
			delete(m.recent, oldest)
		}
		s = &Summary{AgentID: b.AgentID, InstanceID: b.InstanceID, Destination: b.Destination, Proto: b.Proto}
		m.recent[k] = s
	}
	s.Count++
	s.Last, s.Port = b.Time, b.Port
	m.mu.Unlock()
	m.cfg.Logger.Debug("desktop egress refused", "instance", b.InstanceID, "agent", b.AgentID, "destination", b.Destination, "port", b.Port, "proto", b.Proto)
	if m.cfg.OnBlocked != nil {
		m.cfg.OnBlocked(b)
	}
}

// lookupTimeout bounds one name resolution of the DNS filter.
const lookupTimeout = 5 * time.Second

// Enforce enforces on started desktop d the policy it has under node settings ns: its agent's
// own, else the node's (Effective). Open where nothing can be enforced is no error; any other
// policy that cannot be enforced fails the start (vm.Config.Egress, on the server and runners).
func (m *Manager) Enforce(ctx context.Context, ns store.NodeSettings, d Desktop) error {
	p := Effective(ns, d.AgentID)
	err := m.Apply(ctx, d, p)
	if err != nil && errors.Is(err, fault.ErrUnavailable) && (p.Mode == "" || p.Mode == Open) {
		return nil
	}
	return err
}

// Apply enforces policy p on desktop d, replacing what was enforced on it before. Open removes
// the enforcement. Errors: fault.ErrInvalid for a bad policy; fault.ErrUnavailable when the
// desktop's network cannot be entered from here (an engine in a VM, not root).
func (m *Manager) Apply(ctx context.Context, d Desktop, p store.EgressPolicy) error {
	r, err := Compile(p)
	if err != nil {
		return err
	}
	return m.apply(ctx, d, r)
}
