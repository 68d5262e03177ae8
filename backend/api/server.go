// Package api serves Cubicle's HTTP API (SPEC §1.11, §2.1, §3) and the built web UI.
//
// Every request passes the guard (Host allow-list, Origin and Content-Type checks, CORS for
// the desktop window's origin), then authentication (session cookie or bearer token; only
// GET /api/health and POST /api/auth/login are open), then the route. Errors are mapped to
// HTTP status in one function (status in errors.go) from their fault class.
package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"cubicle/backend/auth"
	"cubicle/backend/doctor"
	"cubicle/backend/fault"
	"cubicle/backend/profile"
	"cubicle/backend/release"
	"cubicle/backend/store"
)

// SessionCookie is the name of the session cookie.
const SessionCookie = "cubicle_session"

// DeviceCookie holds the device token of a client that logged in before (auth.DeviceToken):
// sent to the login route only, it keeps others' wrong guesses from holding that client up.
const DeviceCookie = "cubicle_device"

// Config configures a Server. Auth, Accounts, Profiles and AllowedHosts are required.
type Config struct {
	Auth       *auth.Service
	Accounts   Accounts   // the accounts the Users page lists
	HostAccess HostAccess // host access grants; nil: the grant routes answer 503
	Security   Security   // Settings → Security; nil: its routes answer 503
	Egress     Egress     // desktops' egress policies; nil: its routes answer 503
	Sandbox    Sandbox    // the host sandbox's refusals and widenings; nil: its routes answer 503
	Profiles   *profile.Service
	Doctor     func(ctx context.Context) doctor.Report // nil: the doctor route answers 503
	VMs        VMs                                     // the Local VM manager; nil: its routes answer 503
	Chat       Chat                                    // nil: the chat routes answer 503
	Chats      ChatStore                               // saved conversations and tool history
	Groups     Groups                                  // group chats; nil answers 503
	Models     Models                                  // chat model settings; nil answers 503
	LiveView   LiveView                                // the live screen channel (liveview); nil answers 503
	Computers  Computers                               // agents' computer settings; nil answers 503
	Placement  Placement                               // routes Local VM calls to nodes; nil: VMs only
	Runners    Runners                                 // execution nodes; nil answers 503
	Dist       *release.Dist                           // runner binaries offered for download; nil: none
	Engines    Engines                                 // the node's engine choice; nil answers 503
	Events     Events                                  // the event bus the UI's stream reads; nil answers 503
	Setup      Setup                                   // the first-run steps; nil answers 503
	// Housekeeping lists and removes leftovers on the engine; nil answers 503.
	Housekeeping Housekeeping
	// Tokens are the personal API tokens; nil answers 503. MCP is the MCP endpoint served at
	// /mcp behind the guard (it checks its own bearer token); nil: no /mcp.
	Tokens Tokens
	MCP    http.Handler
	// MCPServers are the MCP servers agents use; nil answers 503.
	MCPServers MCPServers
	// Snapshots are agents' workspace snapshots; nil answers 503.
	Snapshots Snapshots
	// Recordings are the desktops' recordings (docs/recording.md); nil answers 503.
	Recordings Recordings
	Logger     *slog.Logger
	Version    string

	// Knowledge is the knowledge base of past runs; nil answers 503.
	Knowledge Knowledge

	// AllowedHosts are the host names (no port) requests may be addressed to.
	AllowedHosts []string
	// TrustedOrigins are foreign page origins allowed to call the API with a bearer token
	// (the desktop window).
	TrustedOrigins []string
	// Assets is the built UI; nil or unbuilt serves a page saying how to build it.
	Assets      fs.FS
	AssetsBuilt bool
	// SecureCookies marks the session cookie Secure (set when served behind TLS).
	SecureCookies bool
	// TrustedProxies are the addresses or CIDR prefixes of reverse proxies whose
	// X-Forwarded-For (the client's address, for the login limit) and X-Forwarded-Proto
	// ("https" marks the session cookie Secure) are believed.
	TrustedProxies []string
	// BodyTimeout bounds reading a request's body (a client that sends it slowly is cut off);
	// 0 means 30 s. The header has its own bound (10 s).
	BodyTimeout time.Duration
	// MaxStreams is how many event streams one account may hold open (0 means 32).
	MaxStreams int
}

// Accounts is the part of the store the Users page reads.
type Accounts interface {
	Account(id string) (store.Account, error)
	Accounts() ([]store.Account, error)
}

// Server is the HTTP front of the backend.
type Server struct {
	cfg      Config
	log      *slog.Logger
	handler  http.Handler
	proxies  []netip.Prefix // Config.TrustedProxies
	patterns []string       // the routes, as registered

	streamsMu sync.Mutex
	streams   map[string]int // open event streams by account; guarded by streamsMu
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Auth == nil || cfg.Profiles == nil || cfg.Accounts == nil {
		return nil, errors.New("api: Config.Auth, Config.Accounts and Config.Profiles are required")
	}
	if len(cfg.AllowedHosts) == 0 {
		return nil, errors.New("api: Config.AllowedHosts is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 30 * time.Second
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 32
	}
	s := &Server{cfg: cfg, log: cfg.Logger, streams: map[string]int{}}
	for _, p := range cfg.TrustedProxies {
		pre, err := parsePrefix(p)
		if err != nil {
			return nil, err
		}
		s.proxies = append(s.proxies, pre)
	}
	mux := &router{ServeMux: http.NewServeMux()}
	s.routes(mux)
	s.patterns = mux.patterns
	s.handler = newGuard(cfg.AllowedHosts, cfg.TrustedOrigins,
		s.hsts(securityHeaders(bodyDeadline(cfg.BodyTimeout, jsonBodies(mux)))))
	return s, nil
}

// Handler returns the server's root handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Routes returns the pattern of every route the server registered ("METHOD /path/{id}", or a
// bare path for a catch-all), in the order registered. Tests walk it so that a new route is
// attacked (login, roles, ownership, origins, bodies) without being listed by hand.
func (s *Server) Routes() []string { return append([]string(nil), s.patterns...) }

// router is the server's ServeMux that remembers the patterns registered on it.
type router struct {
	*http.ServeMux
	patterns []string
}

func (m *router) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m *router) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Run serves on ln until ctx ends, then shuts down gracefully (5 s at most).
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	<-errc
	return nil
}

func (s *Server) routes(mux *router) {
	mux.HandleFunc("GET /api/health", s.health)
	mux.HandleFunc("POST /api/auth/login", s.login)
	mux.Handle("POST /api/auth/logout", s.authed(s.logout))
	mux.Handle("GET /api/auth/me", s.authed(s.me))
	mux.Handle("GET /api/app/events", s.authed(s.streamEvents))

	mux.Handle("GET /api/app/agents", s.authed(s.listAgents))
	mux.Handle("POST /api/app/agents", s.authed(s.createAgent))
	mux.Handle("GET /api/app/agents/{id}", s.authed(s.getAgent))
	mux.Handle("PATCH /api/app/agents/{id}", s.authed(s.renameAgent))
	mux.Handle("DELETE /api/app/agents/{id}", s.authed(s.deleteAgent))
	mux.Handle("GET /api/app/agents/{id}/deletion", s.authed(s.agentDeletion))
	mux.Handle("PUT /api/app/agents/{id}/computer-selection", s.authed(s.selectComputer))
	// The channel checks the login itself: it also accepts ?access_token= on upgrades.
	mux.HandleFunc("GET /api/app/agents/{id}/computer", s.computerRoute)
	s.computerRoutes(mux)
	s.fileRoutes(mux)
	mux.Handle("GET /api/app/agents/{id}/model", s.authed(s.getAgentModel))
	mux.Handle("PUT /api/app/agents/{id}/model", s.authed(s.putAgentModel))
	mux.Handle("POST /api/app/agents/{id}/model/test", s.authed(s.testModel))
	mux.Handle("GET /api/app/agents/{id}/model/models", s.authed(s.listModels))

	mux.Handle("GET /api/app/admin/doctor", s.admin(s.doctor))
	s.setupRoutes(mux)
	s.localVMRoutes(mux)
	s.runnerRoutes(mux)
	s.releaseRoutes(mux)
	s.engineRoutes(mux)
	mux.Handle("GET /api/app/admin/housekeeping", s.admin(s.leftovers))
	mux.Handle("POST /api/app/admin/housekeeping/clean", s.admin(s.cleanLeftovers))
	mux.Handle("GET /api/app/admin/model", s.admin(s.getModel))
	mux.Handle("PUT /api/app/admin/model", s.admin(s.putModel))
	mux.Handle("POST /api/app/admin/model/test", s.admin(s.testModel))
	mux.Handle("GET /api/app/admin/model/models", s.admin(s.listModels))
	mux.Handle("GET /api/app/knowledge", s.authed(s.needKnowledge(s.knowledgeStats)))
	mux.Handle("GET /api/app/knowledge/search", s.authed(s.needKnowledge(s.searchKnowledge)))
	mux.Handle("DELETE /api/app/admin/knowledge", s.admin(s.needKnowledge(s.clearKnowledge)))
	mux.Handle("GET /api/app/admin/knowledge/embeddings", s.admin(s.needKnowledge(s.getEmbeddings)))
	mux.Handle("PUT /api/app/admin/knowledge/embeddings", s.admin(s.needKnowledge(s.putEmbeddings)))
	s.userRoutes(mux)
	s.securityRoutes(mux)
	s.egressRoutes(mux)
	s.sandboxRoutes(mux)
	s.tokenRoutes(mux)
	s.mcpServerRoutes(mux)
	s.snapshotRoutes(mux)
	s.recordingRoutes(mux)

	mux.Handle("POST /api/app/chat", s.authed(s.needChat(s.chat)))
	mux.Handle("POST /api/app/chat/stop", s.authed(s.needChat(s.chatStop)))
	mux.Handle("GET /api/app/chat/sessions", s.authed(s.needChat(s.listChats)))
	mux.Handle("GET /api/app/chat/sessions/{id}", s.authed(s.needChat(s.getChat)))
	mux.Handle("GET /api/app/chat/sessions/{id}/history", s.authed(s.needChat(s.chatHistory)))
	mux.Handle("GET /api/app/chat/sessions/{id}/history.jsonl", s.authed(s.needChat(s.chatHistoryExport)))
	mux.Handle("POST "+externalPath, s.authed(s.needChat(s.chatExternal)))
	s.groupChatRoutes(mux)

	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "no such API route: " + r.Method + " " + r.URL.Path, Code: "not_found"})
	})
	mux.Handle("/", s.ui())
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "version": s.cfg.Version})
}

// parsePrefix reads a trusted proxy: an address or a CIDR prefix.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fault.Invalid("trusted proxy %q is neither an IP address nor a CIDR prefix (e.g. 10.0.0.5 or 10.0.0.0/24)", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// bodyDeadline bounds the time a client may take to send a request's body: a body sent
// slowly (slowloris) is cut off after d, and the connection closed. The deadline ends as soon
// as the body has been read, so a long answer (a chat stream) is not cut off.
func bodyDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r) // not a real connection (tests with a recorder)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline once the body has been read to its end. A body cut off
// by the deadline keeps it, so the server gives up on the connection instead of waiting for
// the rest.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// hsts adds Strict-Transport-Security to answers served over TLS (the server's own, or a
// trusted proxy's), so that the browser keeps to HTTPS for the server's name. Plain HTTP
// answers do not carry it (a browser ignores it there).
func (s *Server) hsts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.secure(r) {
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
		}
		next.ServeHTTP(w, r)
	})
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		next.ServeHTTP(w, r)
	})
}
