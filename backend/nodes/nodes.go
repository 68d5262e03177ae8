// Package nodes is the server's side of execution nodes (SPEC §4): the registry of runners
// (id, name, a hash of the token, cloud flag, last hello), the accept path of their links
// (GET /api/runner/connect), revocation, and per node a Remote that drives the node's desktops
// over its link with the same calls the server makes of its own vm.Manager.
//
// Trust: the server stores only SHA-256 of a runner's secret; the token ("<node id>.<secret>")
// is shown once when the runner is added. Revoking a runner marks it revoked (its token stops
// working) and closes its link at once.
//
// Fail closed: while a node's link is down every call for it is refused with a
// fault.ErrUnavailable error naming the runner, its relayed driver links end (their pending
// calls fail at once), and Config.OnDisconnect lets the backend end control leases.
//
// Ownership: the Hub owns one watcher goroutine per connected runner; Close closes every link
// and waits for them.
package nodes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/release"
	"cubicle/backend/store"
	"cubicle/runner/wire"
)

// LocalID is the node id of the server's own machine.
const LocalID = "local"

// Statuses of a runner.
const (
	StatusConnected    = "connected"
	StatusDisconnected = "disconnected"
	StatusRevoked      = "revoked"
)

// Config configures a Hub. Store is required.
type Config struct {
	Store   *store.Store
	Logger  *slog.Logger
	Version string // the server's version, compared with runners'
	// OnDisconnect hears that node's link ended (after its relayed links failed) with the
	// desktops the server used on it; the backend ends their control leases. It must not block
	// for long.
	OnDisconnect func(node string, desktops []string)
	// OnConnect hears that node's link is up: from now on Node(node) reaches it. It must not
	// block for long.
	OnConnect func(node string)
	// Dist is what the server offers its runners to download (nil: nothing, and no runner is
	// told of an update).
	Dist *release.Dist
	// Events, when set, hears runners connect, disconnect and be revoked, and their desktops
	// change state (events.RunnerStatus, events.DesktopState, …; see events.go).
	Events Publisher
	// OnEgressBlocked hears a refusal of a runner desktop's egress policy (wire.CapEgress),
	// with who may see it (the runner's word about whose desktop it is, believed as far as the
	// server's records agree). It must not block for long.
	OnEgressBlocked func(node string, aud events.Audience, b wire.EgressBlocked)
}

// Hub keeps the registry and the live links.
type Hub struct {
	cfg      Config
	log      *slog.Logger
	upgrader websocket.Upgrader
	wg       sync.WaitGroup

	mu     sync.Mutex
	conns  map[string]*conn // by node id
	closed bool
	desks  map[string]map[string]desk        // node → desktop id → as last known (events.go)
	max    map[string]int                    // node → its capacity as last known
	dups   map[string]events.RunnerDuplicate // node → the last refused second connection on its token
}

// conn is one runner's live link.
type conn struct {
	node   string
	name   string
	hello  wire.Hello
	sess   *yamux.Session
	since  time.Time
	remote string // the runner's network address

	mu     sync.Mutex               // guards the fields below
	guests map[string]*guest.Client // relayed driver links by desktop id
	seen   map[string]bool          // desktop ids the server used on this link
	host   *wire.HostInfo           // the runner's home and own protected paths, once it said a home
	sent   map[string]int           // requests sent on this link by op (tests: nothing is sent that is refused)
}

// New returns a Hub.
func New(cfg Config) (*Hub, error) {
	if cfg.Store == nil {
		return nil, errors.New("nodes: Config.Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Hub{cfg: cfg, log: cfg.Logger, conns: map[string]*conn{}, desks: map[string]map[string]desk{}, max: map[string]int{},
		dups: map[string]events.RunnerDuplicate{}}
	h.upgrader = websocket.Upgrader{HandshakeTimeout: 15 * time.Second, ReadBufferSize: wire.BufferSize, WriteBufferSize: wire.BufferSize,
		// A runner is not a web page: an upgrade carrying an Origin is refused below.
		CheckOrigin: func(*http.Request) bool { return true }}
	return h, nil
}

// Created is a new runner as POST /api/app/admin/runners answers it: the only time its token
// is shown.
type Created struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Cloud bool   `json:"cloud"`
	Token string `json:"token"`
	// JoinCommand is one line for a Linux or macOS shell: download the server's cubicle binary
	// for the machine (over the token) and run it as this runner. JoinCommands has it per
	// system ("linux/macos", "windows"); RunCommand is the runner's command line alone, for a
	// machine that already has cubicle.
	JoinCommand  string            `json:"joinCommand"`
	JoinCommands map[string]string `json:"joinCommands"`
	RunCommand   string            `json:"runCommand"`
}

// Desktops counts a node's desktops.
type Desktops struct {
	Running int `json:"running"`
	Max     int `json:"max"`
}

// View is one runner as GET /api/app/admin/runners lists it.
type View struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Status       string    `json:"status"`
	Version      string    `json:"version"`
	OS           string    `json:"os"`
	Arch         string    `json:"arch"`
	Engine       string    `json:"engine"`
	EngineError  string    `json:"engineError,omitempty"`
	Capabilities []string  `json:"capabilities"`
	Desktops     Desktops  `json:"desktops"`
	LastSeen     time.Time `json:"lastSeen,omitzero"`
	Cloud        bool      `json:"cloud"`
	// Channel is the runner's update channel (release or canary); TargetVersion the version
	// its channel's rollout wants it to run ("" = none: it keeps its own). UpdateAvailable
	// says the server offers TargetVersion for the runner's os/arch and the runner runs
	// another version; UpdateProblem says why a wanted update cannot be offered, or why the
	// runner's last automatic update failed.
	Channel         string `json:"channel"`
	TargetVersion   string `json:"targetVersion"`
	UpdateAvailable bool   `json:"updateAvailable"`
	UpdateProblem   string `json:"updateProblem,omitempty"`
	// Duplicate: a second process tried to connect with this runner's token while its link
	// was alive, and was refused (the last such attempt since the server started).
	Duplicate *events.RunnerDuplicate `json:"duplicate,omitempty"`
}

// validName checks a runner's name.
func validName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > 64 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fault.Invalid(`send {"name": "…"}: 1–64 printable characters, e.g. "mac-mini"`)
	}
	return name, nil
}

// Create registers a runner and returns its token (once). serverURL is how runners reach this
// server (the joinCommand's --server).
func (h *Hub) Create(name string, cloud bool, serverURL string) (Created, error) {
	name, err := validName(name)
	if err != nil {
		return Created{}, err
	}
	idb := make([]byte, 6)
	secret := make([]byte, 32)
	rand.Read(idb)
	rand.Read(secret)
	id := "r-" + hex.EncodeToString(idb)
	sec := base64.RawURLEncoding.EncodeToString(secret)
	sum := sha256.Sum256([]byte(sec))
	if err := h.cfg.Store.CreateRunner(store.Runner{ID: id, Name: name, TokenHash: sum[:], Cloud: cloud, CreatedAt: time.Now().UTC()}); err != nil {
		return Created{}, err
	}
	tok := id + "." + sec
	run, joins := joinCommands(serverURL, tok, name)
	h.log.Info("runner added", "node", id, "name", name, "cloud", cloud)
	return Created{ID: id, Name: name, Cloud: cloud, Token: tok, JoinCommand: joins["linux/macos"], JoinCommands: joins, RunCommand: run}, nil
}

// joinCommands are the lines a newcomer pastes on the runner's machine: download the server's
// cubicle binary for that machine's os/arch with the token, then run it. serverURL was checked
// by the API (no shell metacharacters); the token is base64url; the name is quoted.
func joinCommands(serverURL, tok, name string) (run string, joins map[string]string) {
	run = fmt.Sprintf("cubicle runner --server %s --token %s --name %s", serverURL, tok, shellQuote(name))
	posix := fmt.Sprintf(`curl -fSL -H 'Authorization: Bearer %s' "%s%s?os=$(uname -s | tr A-Z a-z)&arch=$(uname -m | sed 's/x86_64/amd64/;s/aarch64/arm64/')" -o cubicle && chmod +x cubicle && ./cubicle runner --server %s --token %s --name %s`,
		tok, serverURL, wire.DownloadPath, serverURL, tok, shellQuote(name))
	win := fmt.Sprintf(`$a = $env:PROCESSOR_ARCHITECTURE.ToLower(); Invoke-WebRequest -Headers @{Authorization='Bearer %s'} -Uri "%s%s?os=windows&arch=$a" -OutFile cubicle.exe; .\cubicle.exe runner --server %s --token %s --name %s`,
		tok, serverURL, wire.DownloadPath, serverURL, tok, psQuote(name))
	return run, map[string]string{"linux/macos": posix, "windows": win}
}

// psQuote quotes s as one PowerShell single-quoted string. PowerShell takes five characters
// as a single quote — ' and the typographic ‘ ’ ‚ ‛ — and any of them ends the string unless
// doubled, so each is doubled.
func psQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch r {
		case '\'', '\u2018', '\u2019', '\u201a', '\u201b':
			b.WriteRune(r)
		}
		b.WriteRune(r)
	}
	b.WriteByte('\'')
	return b.String()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// List returns every runner with its live status. For a connected runner the desktop counts
// are asked of it (briefly); otherwise they are what it said when it last connected.
func (h *Hub) List(ctx context.Context) ([]View, error) {
	rs, err := h.cfg.Store.Runners()
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(rs))
	for _, r := range rs {
		if r.Managed {
			continue // this computer's managed local runner is not an external runner
		}
		v := View{ID: r.ID, Name: r.Name, Status: StatusDisconnected, Capabilities: []string{}, LastSeen: r.LastSeen, Cloud: r.Cloud}
		var hello wire.Hello
		if len(r.Hello) > 0 && json.Unmarshal(r.Hello, &hello) == nil {
			v.Version, v.OS, v.Arch, v.Engine, v.EngineError = hello.Version, hello.OS, hello.Arch, hello.Engine, hello.EngineError
			v.Capabilities = append(v.Capabilities, hello.Capabilities...)
			v.Desktops = Desktops{Running: hello.Running, Max: hello.MaxInstances}
		}
		h.mu.Lock()
		if d, ok := h.dups[r.ID]; ok {
			v.Duplicate = &d
		}
		h.mu.Unlock()
		p := h.plan(r, hello)
		v.Channel, v.TargetVersion, v.UpdateAvailable, v.UpdateProblem = p.channel, p.target, p.available, p.problem
		if r.Revoked {
			v.Status = StatusRevoked
			v.UpdateAvailable, v.UpdateProblem = false, ""
		} else if c := h.conn(r.ID); c != nil {
			v.Status = StatusConnected
			v.LastSeen = time.Now().UTC()
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			if st, err := (&Remote{h: h, id: r.ID}).Status(sctx); err == nil {
				v.Desktops = Desktops{Running: st.Running, Max: st.Policy.MaxInstances}
			}
			cancel()
		}
		out = append(out, v)
	}
	return out, nil
}

// Revoke marks runner id revoked (its token stops working) and drops its link at once.
func (h *Hub) Revoke(id string) error {
	if id == LocalID {
		return fault.Invalid("the local node cannot be revoked")
	}
	if _, err := h.cfg.Store.UpdateRunner(id, func(r *store.Runner) error {
		if !r.Revoked {
			r.Revoked, r.RevokedAt = true, time.Now().UTC()
		}
		return nil
	}); err != nil {
		return err
	}
	h.mu.Lock()
	c := h.conns[id]
	h.mu.Unlock()
	if c != nil {
		c.sess.Close() // the watcher removes it, tells OnDisconnect and publishes "revoked"
	} else {
		h.runnerEvent(id, StatusRevoked)
	}
	h.log.Info("runner revoked", "node", id)
	return nil
}

// Known reports whether node may take agents: the local node, or a registered runner that is
// not revoked (connected or not). Other ids are fault.ErrNotFound or fault.ErrConflict.
func (h *Hub) Known(node string) (store.Runner, error) {
	if node == LocalID {
		return store.Runner{ID: LocalID, Name: "this computer"}, nil
	}
	r, err := h.cfg.Store.Runner(node)
	if err != nil {
		return r, fault.NotFound("no runner %q: see Settings → Runners for the node ids", node)
	}
	if r.Revoked {
		return r, fault.Conflict("runner %s (%s) was revoked: add it again to use that machine", r.Name, r.ID)
	}
	return r, nil
}

// Connected reports whether node's link is up.
func (h *Hub) Connected(node string) bool { return h.conn(node) != nil }

// Hello returns what node said when it connected (false when it is not connected).
func (h *Hub) Hello(node string) (wire.Hello, bool) {
	c := h.conn(node)
	if c == nil {
		return wire.Hello{}, false
	}
	return c.hello, true
}

// ConnectedWith returns the ids of the connected runners (node "local" included when its
// managed runner is connected) whose hello advertises capability c, sorted.
func (h *Hub) ConnectedWith(c string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id, cn := range h.conns {
		if hasCap(cn.hello, c) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (h *Hub) conn(node string) *conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[node]
}

// Close drops every link and waits for the watchers.
func (h *Hub) Close() error {
	h.mu.Lock()
	h.closed = true
	cs := make([]*conn, 0, len(h.conns))
	for _, c := range h.conns {
		cs = append(cs, c)
	}
	h.mu.Unlock()
	for _, c := range cs {
		c.sess.Close()
	}
	h.wg.Wait()
	return nil
}

// hasCap reports whether hello advertises capability c.
func hasCap(hello wire.Hello, c string) bool { return slices.Contains(hello.Capabilities, c) }
