package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/egress"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// DefaultConnectTimeout bounds connecting to a server and listing its tools unless
// Config.ConnectTimeout says otherwise; retryAfter is how long a server that could not be
// reached is left alone before the next turn tries again (so one server that is down does not
// slow every turn).
const (
	DefaultConnectTimeout = 15 * time.Second
	retryAfter            = 30 * time.Second
)

// startTimeout bounds starting and connecting to the server: the connect timeout, or for a
// stdio server the server's own timeout when that is longer — its program may have to fetch
// itself first (npx -y downloading the package on the first start takes 20–30 s).
func (c *conn) startTimeout() time.Duration {
	d := c.svc.cfg.ConnectTimeout
	if c.srv.Transport == TransportStdio {
		d = max(d, serverTimeout(c.srv))
	}
	return d
}

// conn is the connection to one server (for a stdio server: in one desktop).
type conn struct {
	svc *Service
	srv store.MCPServer // the settings it was made with
	key string

	mu       sync.Mutex         // serialises connecting and listing
	cs       *mcp.ClientSession // guarded by mu; nil until connected
	closer   func()             // guarded by mu; stops what the transport started (stdio)
	tools    []*mcp.Tool        // guarded by mu; nil until listed
	failedAt time.Time          // guarded by mu; the last failed connect
	failure  error              // guarded by mu
	stale    atomic.Bool        // the server said its tools changed (notifications/tools/list_changed)
}

// connFor returns the connection to srv for turn t, made on first use.
func (s *Service) connFor(srv store.MCPServer, t agent.TurnInfo) (*conn, error) {
	key := srv.ID
	if srv.Transport == TransportStdio {
		where, prefix, err := s.stdioHost(srv)
		if err != nil {
			return nil, err
		}
		dk, err := where.Key(t)
		if err != nil {
			return nil, err
		}
		key = srv.ID + "@" + prefix + dk
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fault.Unavailable("the MCP client is shut down")
	}
	c := s.conns[key]
	var old *conn
	if c == nil || !c.srv.UpdatedAt.Equal(srv.UpdatedAt) {
		old = c // made with settings that changed since
		c = &conn{svc: s, srv: srv, key: key}
		s.conns[key] = c
	}
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	return c, nil
}

// stdioHost is where stdio server srv runs — inside the agent's desktop, or on the Cubicle
// server when an administrator marked it so — and the prefix of its connections' keys there.
func (s *Service) stdioHost(srv store.MCPServer) (Desktops, string, error) {
	if srv.OnServer {
		if s.cfg.OnServer == nil {
			return nil, "", fault.Unavailable("MCP server %q runs on the Cubicle server, which does not offer that here", srv.Name)
		}
		return s.cfg.OnServer, "server:", nil
	}
	if s.cfg.Desktops == nil {
		return nil, "", fault.Unavailable("stdio MCP servers run inside the agent's desktop, which this server cannot reach")
	}
	return s.cfg.Desktops, "", nil
}

// drop closes every connection to server id (its settings changed or it was deleted).
func (s *Service) drop(id string) {
	s.mu.Lock()
	var gone []*conn
	for k, c := range s.conns {
		if c.srv.ID == id {
			gone = append(gone, c)
			delete(s.conns, k)
		}
	}
	s.mu.Unlock()
	for _, c := range gone {
		c.close()
	}
}

// DesktopStopped drops the connections to stdio servers in the desktop key (the processes
// went with it).
func (s *Service) DesktopStopped(key string) {
	s.mu.Lock()
	var gone []*conn
	for k, c := range s.conns {
		if c.srv.Transport == TransportStdio && k == c.srv.ID+"@"+key {
			gone = append(gone, c)
			delete(s.conns, k)
		}
	}
	s.mu.Unlock()
	for _, c := range gone {
		c.close()
	}
}

// session returns the live session, connecting when there is none. Call with c.mu held.
func (c *conn) session(ctx context.Context, t agent.TurnInfo) (*mcp.ClientSession, error) {
	if c.cs != nil {
		return c.cs, nil
	}
	if !c.failedAt.IsZero() && c.svc.cfg.Now().Sub(c.failedAt) < retryAfter {
		return nil, c.failure
	}
	cs, closer, err := c.connect(ctx, t)
	if err != nil {
		c.failedAt, c.failure = c.svc.cfg.Now(), err
		return nil, err
	}
	c.cs, c.closer, c.tools, c.failedAt, c.failure = cs, closer, nil, time.Time{}, nil
	// A session that ends on its own (the server exited, the desktop stopped, the network
	// broke) is dropped at once, so the next use connects again instead of failing once.
	c.svc.bg.Add(1)
	go func() {
		defer c.svc.bg.Done()
		cs.Wait()
		c.reset(cs)
	}()
	return cs, nil
}

func (c *conn) connect(ctx context.Context, t agent.TurnInfo) (*mcp.ClientSession, func(), error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "cubicle", Version: c.svc.cfg.Version}, &mcp.ClientOptions{
		Capabilities:           &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.stale.Store(true) },
	})
	var tr mcp.Transport
	closer := func() {}
	switch c.srv.Transport {
	case TransportHTTP, TransportSSE:
		headers, err := c.svc.openAll(c.srv.Headers)
		if err != nil {
			return nil, nil, err
		}
		// The rules of model endpoints: no loopback or private address unless the
		// administrator allowed it, checked at every dial; no redirects.
		hc := egress.ModelClient(c.srv.AllowPrivate)
		hc.Transport = headerTransport{base: hc.Transport, headers: headers}
		if c.srv.Transport == TransportSSE {
			tr = &mcp.SSEClientTransport{Endpoint: c.srv.URL, HTTPClient: hc}
		} else {
			tr = &mcp.StreamableClientTransport{Endpoint: c.srv.URL, HTTPClient: hc, MaxRetries: 2}
		}
	case TransportStdio:
		env, err := c.svc.openAll(c.srv.Env)
		if err != nil {
			return nil, nil, err
		}
		where, _, err := c.svc.stdioHost(c.srv)
		if err != nil {
			return nil, nil, err
		}
		place := "in the desktop"
		if c.srv.OnServer {
			place = "on the server"
		}
		rwc, err := where.Spawn(ctx, t, Process{Key: c.key, Command: c.srv.Command, Args: c.srv.Args, Env: env})
		if err != nil {
			return nil, nil, fmt.Errorf("start MCP server %q %s: %w", c.srv.Name, place, err)
		}
		tr = &mcp.IOTransport{Reader: rwc, Writer: rwc}
		closer = func() { rwc.Close() }
	default:
		return nil, nil, fault.Invalid("MCP server %q has an unknown transport %q", c.srv.Name, c.srv.Transport)
	}
	// The connection's own context lives until it is closed (the SSE transport's event
	// stream runs in the context it was connected with); connecting is bounded apart, by the
	// connect timeout and the caller's context.
	life, end := context.WithCancel(context.WithoutCancel(ctx))
	timer := time.AfterFunc(c.startTimeout(), end)
	stopCaller := context.AfterFunc(ctx, end)
	cs, err := client.Connect(life, tr, nil)
	timedOut := !timer.Stop()
	cancelled := !stopCaller()
	if err == nil && (timedOut || cancelled) {
		cs.Close()
		err = fmt.Errorf("connect: %w", context.DeadlineExceeded)
	}
	if err == nil {
		prev := closer
		closer = func() { end(); prev() }
	} else {
		defer end()
	}
	if err != nil {
		why := ""
		if l, ok := tr.(*mcp.IOTransport); ok {
			if p, ok := l.Reader.(interface{ Log(context.Context) string }); ok {
				lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
				if log := p.Log(lctx); log != "" {
					why = "; its output: " + log
				}
				lcancel()
			}
		}
		closer()
		if errors.Is(err, fault.ErrForbidden) {
			why += " (an administrator may allow loopback and private addresses for this server in Settings → Tools)"
		}
		return nil, nil, fault.Unavailable("MCP server %q cannot be reached: %v%s", c.srv.Name, err, why)
	}
	return cs, closer, nil
}

// list returns the server's tools, listing them again when the server said they changed.
func (c *conn) list(ctx context.Context, t agent.TurnInfo) ([]*mcp.Tool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		cs, err := c.session(ctx, t)
		if err != nil {
			return nil, err
		}
		if c.tools != nil && !c.stale.Load() {
			return c.tools, nil
		}
		c.stale.Store(false)
		lctx, cancel := context.WithTimeout(ctx, c.svc.cfg.ConnectTimeout)
		var tools []*mcp.Tool
		for tool, err2 := range cs.Tools(lctx, nil) {
			if err2 != nil {
				err = err2
				break
			}
			tools = append(tools, tool)
			if len(tools) >= 4*MaxToolsPerServer {
				break
			}
		}
		cancel()
		if err == nil {
			if tools == nil {
				tools = []*mcp.Tool{}
			}
			c.tools = tools
			return tools, nil
		}
		c.resetLocked()
		if attempt > 0 || ctx.Err() != nil {
			return nil, fault.Unavailable("MCP server %q did not list its tools: %v", c.srv.Name, err)
		}
	}
}

// call runs tool on the server within the server's deadline.
func (c *conn) call(ctx context.Context, t agent.TurnInfo, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	c.mu.Lock()
	cs, err := c.session(ctx, t)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		// The session may be broken (the server restarted, a stdio process died): the next
		// use connects again.
		c.reset(cs)
	}
	return res, err
}

// reset drops session cs if it is still the current one.
func (c *conn) reset(cs *mcp.ClientSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs == cs {
		c.resetLocked()
	}
}

func (c *conn) resetLocked() {
	cs, closer := c.cs, c.closer
	c.cs, c.closer, c.tools = nil, nil, nil
	if cs == nil && closer == nil {
		return
	}
	// Closing waits for the session's streams to end, which a stuck server can hold up for
	// seconds: it runs apart (the Service's Close waits for it), so a call cut off at its
	// deadline returns at the deadline.
	c.svc.bg.Add(1)
	go func() {
		defer c.svc.bg.Done()
		if cs != nil {
			cs.Close()
		}
		if closer != nil {
			closer()
		}
	}()
}

func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked()
}

var _ http.RoundTripper = headerTransport{}
