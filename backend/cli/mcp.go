package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/fault"
)

// runMCP is `cubicle mcp`: a stdio MCP server for clients that launch a command (Claude Code,
// Codex CLI, Cursor, VS Code), bridging to a Cubicle server's /mcp with an API token. It
// offers the server's tools as they are (following tools/list_changed) and forwards each call.
func runMCP(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "mcp", "cubicle mcp --server URL [--token TOKEN]")
	server := fs.String("server", e.getenv("CUBICLE_SERVER"), "the Cubicle server's URL, e.g. http://127.0.0.1:8765 (env CUBICLE_SERVER)")
	token := fs.String("token", "", "a personal API token (Settings → Account → API tokens); better in env CUBICLE_TOKEN, which other users cannot see in the process list")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error (written to stderr)")
	if err := parse(fs, args); err != nil {
		return err
	}
	tok := cmp.Or(*token, e.getenv("CUBICLE_TOKEN"))
	if *server == "" || tok == "" {
		return fault.Invalid("cubicle mcp needs --server URL and a token (--token, or CUBICLE_TOKEN): make one in Settings → Account → API tokens")
	}
	log, err := newLogger(e.stderr, *logLevel)
	if err != nil {
		return err
	}
	endpoint := strings.TrimRight(*server, "/")
	if !strings.HasSuffix(endpoint, "/mcp") {
		endpoint += "/mcp"
	}
	hc := &http.Client{Transport: bearer{token: tok, next: http.DefaultTransport}}
	var (
		remote *mcp.ClientSession
		local  *mcp.Server
		ready  = make(chan struct{}) // closed once local exists
	)
	sync := func(ctx context.Context) error {
		res, err := remote.ListTools(ctx, nil)
		if err != nil {
			return err
		}
		var names []string
		for _, t := range res.Tools {
			names = append(names, t.Name)
		}
		for _, t := range res.Tools {
			local.AddTool(t, forward(remote, t.Name))
		}
		log.Debug("tools from the server", "tools", names)
		return nil
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "cubicle-mcp-bridge", Version: Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(ctx context.Context, _ *mcp.ToolListChangedRequest) {
			select {
			case <-ready:
			default:
				return // the first listing is still to come
			}
			if err := sync(ctx); err != nil {
				log.Warn("tools changed on the server, but could not be listed", "err", err)
			}
		},
	})
	remote, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		return fault.Unavailable("cannot open an MCP session at %s: %v (check --server, and that the token is valid and not revoked)", endpoint, err)
	}
	defer remote.Close()
	opts := &mcp.ServerOptions{}
	if in := remote.InitializeResult(); in != nil {
		opts.Instructions = in.Instructions
	}
	local = mcp.NewServer(&mcp.Implementation{Name: "cubicle", Title: "Cubicle computers (bridge)", Version: Version}, opts)
	if err := sync(ctx); err != nil {
		return fmt.Errorf("list the server's tools: %w", err)
	}
	close(ready)
	err = local.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(e.stdin), Writer: nopCloser{e.stdout}})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// forward runs a call on the server as it came.
func forward(remote *mcp.ClientSession, name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return remote.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments})
	}
}

// nopCloser leaves the process's stdout open when the session ends.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// bearer adds the API token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
