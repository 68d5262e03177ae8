// Package mcpserver serves Cubicle's computers to agents outside Cubicle (Claude Code, Codex
// CLI, Cursor, VS Code) over the Model Context Protocol: streamable HTTP at /mcp, with a
// personal API token (package apitoken) as the bearer token, built on the official Go SDK.
//
// The tools are list_computers and, for a named agent of the token's owner, the computer
// tools the agent itself has (computer_screenshot, _click, _move, _drag, _scroll, _type,
// _key, _shell, _read_file, _write_file) plus computer_start and computer_stop. This package
// only speaks MCP: every call goes to Computers, which runs it through the same gate as the
// agent's own calls (see backend/mcp.go).
package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/apitoken"
	"cubicle/backend/fault"
)

// Computer is one agent's computer as list_computers shows it.
type Computer struct {
	AgentID  string `json:"agentId"`
	Name     string `json:"name"`
	Computer string `json:"computer"` // the agent's computer selection (vm, cloud, host, …)
	State    string `json:"state"`    // the desktop's state (running, stopped, …; "" unknown)
	Node     string `json:"node,omitempty"`
	// ControlledBy is set while a person has taken over the desktop (input is refused).
	ControlledBy string `json:"controlledBy,omitempty"`
}

// Computers runs what the tools ask for, for the caller, through Cubicle's gate.
type Computers interface {
	List(ctx context.Context, c apitoken.Caller) ([]Computer, error)
	// Call runs tool (an agent's computer_* tool) with args on agent (id or name) and returns
	// the result blocks and the final state (agent.StateSuccess, …).
	Call(ctx context.Context, c apitoken.Caller, agentRef, tool string, args map[string]any) ([]agent.ContentBlock, string, error)
	// Power starts (on) or stops the agent's desktop and says what happened.
	Power(ctx context.Context, c apitoken.Caller, agentRef string, on bool) (string, error)
}

// Verifier checks a bearer token (apitoken.Service implements it).
type Verifier interface {
	Verify(secret string) (apitoken.Caller, error)
}

// Config configures a Server. Computers and Tokens are required.
type Config struct {
	Computers Computers
	Tokens    Verifier
	Version   string
	Logger    *slog.Logger
}

// Server is the MCP endpoint.
type Server struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler
	images  splices
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Computers == nil || cfg.Tokens == nil {
		return nil, errors.New("mcpserver: Config.Computers and Config.Tokens are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	srv := mcp.NewServer(&mcp.Implementation{Name: "cubicle", Title: "Cubicle computers", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: Instructions, Logger: cfg.Logger, KeepAlive: 30 * time.Second,
	})
	s.register(srv)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger: cfg.Logger, SessionTimeout: 30 * time.Minute,
		// Host and Origin are checked by the API's guard in front of this handler, with the
		// rest of the API's rules (--allowed-host); the SDK's own localhost check would
		// refuse a server reached by an allowed name.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        40 << 20, // computer_write_file carries up to 25 MiB, base64
	})
	s.handler = auth.RequireBearerToken(s.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(s.images.splice(h))
	return s, nil
}

// Instructions tell the client's model how to use the tools.
const Instructions = `These tools operate Cubicle computers: real Linux desktops (XFCE, 1280x800) of the agents your token reaches. ` +
	`Call list_computers first; pass the agent's name or id as "agent" to every computer_* tool. ` +
	`Actions return a screenshot once the screen settled. A person may take over a desktop at any time: input is then refused until they hand it back. ` +
	`Some calls need the person's confirmation in Cubicle; the call waits for it.`

// Handler is the endpoint's HTTP handler (mounted at /mcp behind the API's guard).
func (s *Server) Handler() http.Handler { return s.handler }

// verify is the bearer check: a valid API token, its caller in the TokenInfo.
func (s *Server) verify(_ context.Context, secret string, _ *http.Request) (*auth.TokenInfo, error) {
	c, err := s.cfg.Tokens.Verify(secret)
	if err != nil {
		if errors.Is(err, fault.ErrUnauthenticated) {
			return nil, errors.Join(auth.ErrInvalidToken, err)
		}
		return nil, err
	}
	return &auth.TokenInfo{UserID: c.AccountID, Extra: map[string]any{callerKey: c}}, nil
}

const callerKey = "cubicle.caller"

func callerOf(req *mcp.CallToolRequest) (apitoken.Caller, bool) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return apitoken.Caller{}, false
	}
	c, ok := req.Extra.TokenInfo.Extra[callerKey].(apitoken.Caller)
	return c, ok
}

// ToolNames lists the tools the server offers, in order.
func ToolNames() []string {
	out := []string{"list_computers"}
	for _, t := range computerTools {
		out = append(out, t.name)
	}
	return append(out, "computer_start", "computer_stop")
}

type toolDef struct {
	name, title, desc string
	props             string // JSON properties besides "agent"
	required          []string
	readOnly          bool
}

var computerTools = []toolDef{
	{"computer_screenshot", "Screenshot", "Take a screenshot of the agent's desktop.", ``, nil, true},
	{"computer_click", "Click", "Left-click at x,y (button \"right\" or clicks 2 for a double click); returns a screenshot once the screen settled.", `"x":{"type":"integer","minimum":0},"y":{"type":"integer","minimum":0},"button":{"type":"string","enum":["left","right"]},"clicks":{"type":"integer","minimum":1,"maximum":2}`, []string{"x", "y"}, false},
	{"computer_move", "Move the mouse", "Move the mouse to x,y; returns a settled screenshot.", `"x":{"type":"integer","minimum":0},"y":{"type":"integer","minimum":0}`, []string{"x", "y"}, false},
	{"computer_drag", "Drag", "Drag from x,y to to_x,to_y with the left button.", `"x":{"type":"integer","minimum":0},"y":{"type":"integer","minimum":0},"to_x":{"type":"integer","minimum":0},"to_y":{"type":"integer","minimum":0}`, []string{"x", "y", "to_x", "to_y"}, false},
	{"computer_scroll", "Scroll", "Scroll at x,y by dy clicks (positive = down) and dx (positive = right).", `"x":{"type":"integer","minimum":0},"y":{"type":"integer","minimum":0},"dx":{"type":"integer"},"dy":{"type":"integer"}`, []string{"x", "y"}, false},
	{"computer_type", "Type text", "Type text (any language) into the focused window.", `"text":{"type":"string"}`, []string{"text"}, false},
	{"computer_key", "Press keys", "Press a key or combination, e.g. \"Return\", \"ctrl+l\", \"ctrl+alt+t\".", `"keys":{"type":"string"}`, []string{"keys"}, false},
	{"computer_shell", "Shell", "Run a shell command (sh -c) inside the agent's Linux desktop as user cua; default directory /home/cua/workspace.", `"command":{"type":"string"},"cwd":{"type":"string"},"timeout":{"type":"integer","description":"seconds, at most 600"}`, []string{"command"}, false},
	{"computer_read_file", "Read a file", "Read a file inside the agent's desktop.", `"path":{"type":"string","description":"relative paths start in the working directory"}`, []string{"path"}, true},
	{"computer_write_file", "Write a file", "Write a file inside the agent's desktop (replaced atomically).", `"path":{"type":"string"},"content":{"type":"string","description":"text to write"},"base64":{"type":"string","description":"binary content, base64 (instead of content)"}`, []string{"path"}, false},
}

const agentProp = `"agent":{"type":"string","description":"the agent whose computer to use: its name or id (see list_computers)"}`

func schema(props string, required []string) json.RawMessage {
	p := agentProp
	if props != "" {
		p += "," + props
	}
	req, _ := json.Marshal(append([]string{"agent"}, required...))
	return json.RawMessage(`{"type":"object","properties":{` + p + `},"required":` + string(req) + `}`)
}

func (s *Server) register(srv *mcp.Server) {
	yes, no := true, false
	srv.AddTool(&mcp.Tool{Name: "list_computers", Title: "List computers",
		Description: "List the computers (agents) this token reaches, with their desktop state and whether a person controls them.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}, s.list)
	for _, t := range computerTools {
		ann := &mcp.ToolAnnotations{ReadOnlyHint: t.readOnly, OpenWorldHint: &no}
		if !t.readOnly {
			ann.DestructiveHint = &yes
		}
		srv.AddTool(&mcp.Tool{Name: t.name, Title: t.title, Description: t.desc, InputSchema: schema(t.props, t.required),
			Annotations: ann}, s.call(t.name))
	}
	srv.AddTool(&mcp.Tool{Name: "computer_start", Title: "Start the desktop", Description: "Start the agent's desktop (it also starts on the first computer_* call).",
		InputSchema: schema("", nil), Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: &no}}, s.power(true))
	srv.AddTool(&mcp.Tool{Name: "computer_stop", Title: "Stop the desktop", Description: "Stop the agent's desktop (its files are kept).",
		InputSchema: schema("", nil), Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &no, OpenWorldHint: &no}}, s.power(false))
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func (s *Server) list(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c, ok := callerOf(req)
	if !ok {
		return errorResult("no API token"), nil
	}
	list, err := s.cfg.Computers.List(ctx, c)
	if err != nil {
		return errorResult("Error: " + err.Error()), nil
	}
	raw, _ := json.MarshalIndent(map[string]any{"computers": list}, "", "  ")
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}},
		StructuredContent: map[string]any{"computers": list}}, nil
}

// arguments reads a call's arguments: a JSON object.
func arguments(req *mcp.CallToolRequest) (map[string]any, error) {
	args := map[string]any{}
	if len(req.Params.Arguments) == 0 {
		return args, nil
	}
	d := json.NewDecoder(bytes.NewReader(req.Params.Arguments))
	d.UseNumber()
	if err := d.Decode(&args); err != nil {
		return nil, fault.Invalid("the arguments must be a JSON object: %v", err)
	}
	return args, nil
}

func (s *Server) call(tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, ok := callerOf(req)
		if !ok {
			return errorResult("no API token"), nil
		}
		args, err := arguments(req)
		if err != nil {
			return errorResult(err.Error()), nil
		}
		ref, _ := args["agent"].(string)
		if ref == "" {
			return errorResult(`argument "agent" (the agent's name or id, see list_computers) is required`), nil
		}
		delete(args, "agent")
		blocks, state, err := s.cfg.Computers.Call(ctx, c, ref, tool, args)
		if err != nil {
			return errorResult("Error: " + err.Error()), nil
		}
		session := ""
		if req.Session != nil {
			session = req.Session.ID()
		}
		return s.result(blocks, state, session), nil
	}
}

func (s *Server) power(on bool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, ok := callerOf(req)
		if !ok {
			return errorResult("no API token"), nil
		}
		args, err := arguments(req)
		if err != nil {
			return errorResult(err.Error()), nil
		}
		ref, _ := args["agent"].(string)
		if ref == "" {
			return errorResult(`argument "agent" (the agent's name or id, see list_computers) is required`), nil
		}
		msg, err := s.cfg.Computers.Power(ctx, c, ref, on)
		if err != nil {
			return errorResult("Error: " + err.Error()), nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil
	}
}

// result turns a tool's blocks into MCP content: text as text, images as images. The images
// of a call in an MCP session are spliced into its response (see splice.go).
func (s *Server) result(blocks []agent.ContentBlock, state, session string) *mcp.CallToolResult {
	out := &mcp.CallToolResult{Content: []mcp.Content{}, IsError: state != agent.StateSuccess}
	for _, b := range blocks {
		switch b.Type {
		case "text":
			out.Content = append(out.Content, &mcp.TextContent{Text: b.Text})
		case "image":
			if session != "" && !noSplice && base64Text(b.Data) {
				out.Content = append(out.Content, &splicedImage{ImageContent: &mcp.ImageContent{MIMEType: b.MediaType},
					ref: s.images.add(session, b.Data)})
				continue
			}
			data, err := base64.StdEncoding.DecodeString(b.Data)
			if err != nil {
				continue
			}
			out.Content = append(out.Content, &mcp.ImageContent{Data: data, MIMEType: b.MediaType})
		}
	}
	if len(out.Content) == 0 {
		out.Content = append(out.Content, &mcp.TextContent{Text: "Done (" + state + ")."})
	}
	return out
}

// base64Text reports whether data is standard base64 (padded), so it can stand in a JSON
// string as it is.
// noSplice turns splicing off (benchmarks compare).
var noSplice = false

func base64Text(data string) bool {
	if len(data)%4 != 0 {
		return false
	}
	for i := 0; i < len(data); i++ {
		if !base64Chars[data[i]] {
			return false
		}
	}
	return true
}

var base64Chars = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") {
		t[c] = true
	}
	return t
}()
