package mcpclient

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Prefix starts the name of every MCP tool offered to a model.
const Prefix = "mcp_"

// maxName is the longest tool name models accept (OpenAI: ^[a-zA-Z0-9_-]{1,64}$).
const maxName = 64

// Process is a stdio server to start inside a desktop.
type Process struct {
	Key     string // the connection's key (server id @ desktop), to tell processes apart
	Command string
	Args    []string
	Env     map[string]string
}

// Desktops runs stdio servers inside agents' desktops (the desktop is their sandbox).
// Implementations are safe for concurrent use.
type Desktops interface {
	// Key names the desktop of turn t (the agent's own, or a helper's task desktop), without
	// starting it.
	Key(t agent.TurnInfo) (string, error)
	// Spawn starts p in the desktop of turn t (starting the desktop when needed) and returns
	// its stdin (Write) and stdout (Read); Close stops the process.
	Spawn(ctx context.Context, t agent.TurnInfo, p Process) (io.ReadWriteCloser, error)
}

// SandboxWatcher is what a Desktops that runs servers in an OS sandbox (the Cubicle server's
// own, Config.OnServer) may also do: read each result of its servers' tools for what the
// sandbox refused them, record that for an administrator's review, and return the sentences
// the agent gets with the result ("the sandbox refused access to …").
type SandboxWatcher interface {
	SandboxRefused(t agent.TurnInfo, output string) []string
}

// Owns reports whether tool is an MCP tool (mcp_<server>_<tool>).
func Owns(tool string) bool { return strings.HasPrefix(tool, Prefix) }

// exposed is the name a server's tool is offered under: mcp_<server>_<tool>, with the tool's
// name reduced to the characters models accept and, when it had to be changed or shortened, a
// short hash of the original so that two tools never share a name.
func exposed(server, tool string) string {
	base := Prefix + server + "_"
	clean := strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, tool)
	if clean == tool && len(base)+len(clean) <= maxName && clean != "" {
		return base + clean
	}
	sum := sha256.Sum256([]byte(tool))
	h := "_" + hex.EncodeToString(sum[:3])
	room := maxName - len(base) - len(h)
	if len(clean) > room {
		clean = clean[:room]
	}
	return base + clean + h
}

// mapped is a server's tool under its offered name.
type mapped struct {
	srv  store.MCPServer
	conn *conn
	tool *mcp.Tool
	name string
}

// resolve finds the tool an offered name stands for among the servers agent t uses.
func (s *Service) resolve(ctx context.Context, t agent.TurnInfo, name string) (mapped, error) {
	servers, err := s.agentServers(t.AgentID)
	if err != nil {
		return mapped{}, err
	}
	for _, srv := range servers {
		if !strings.HasPrefix(name, Prefix+srv.Name+"_") {
			continue
		}
		if srv.Disabled {
			return mapped{}, fault.Forbidden("the MCP server %q is turned off (Settings → Tools)", srv.Name)
		}
		c, err := s.connFor(srv, t)
		if err != nil {
			return mapped{}, err
		}
		tools, err := c.list(ctx, t)
		if err != nil {
			return mapped{}, err
		}
		for _, tool := range tools {
			if exposed(srv.Name, tool.Name) == name {
				return mapped{srv: srv, conn: c, tool: tool, name: name}, nil
			}
		}
		return mapped{}, fault.NotFound("the MCP server %q offers no tool %s (any more); use the tools you are offered", srv.Name, name)
	}
	return mapped{}, fault.NotFound("%s is not a tool of an MCP server this agent uses", name)
}

// Tools implements agent.Toolbox: the tools of the servers the agent uses that its policy
// does not deny to this person and agent, at most MaxToolsPerServer per server and MaxTools
// in all. A server that cannot be reached offers nothing (and is tried again later). Task
// helpers get no MCP tools.
func (s *Service) Tools(ctx context.Context, t agent.TurnInfo) []agent.ToolSpec {
	if t.TaskID != "" || t.AgentID == "" {
		return nil
	}
	servers, err := s.agentServers(t.AgentID)
	if err != nil {
		s.log.Warn("mcp servers of an agent", "agent", t.AgentID, "err", err)
		return nil
	}
	sub := s.subject(t)
	var out []agent.ToolSpec
	for _, srv := range servers {
		if srv.Disabled || srv.Transport == TransportStdio && s.cfg.Desktops == nil {
			continue
		}
		c, err := s.connFor(srv, t)
		if err != nil {
			s.log.Warn("mcp server", "server", srv.Name, "err", err)
			continue
		}
		tools, err := c.list(ctx, t)
		if err != nil {
			s.log.Warn("mcp server: list tools", "server", srv.Name, "err", err)
			continue
		}
		n := 0
		for _, tool := range tools {
			if Decide(srv.Policy, tool.Name, sub).Effect == Deny {
				continue // the model is not offered what it may not use
			}
			if n >= MaxToolsPerServer || len(out) >= MaxTools {
				s.log.Warn("mcp server offers more tools than a model is given", "server", srv.Name, "tools", len(tools))
				break
			}
			out = append(out, spec(srv, tool))
			n++
		}
	}
	return out
}

// serverTimeout is how long a call of srv's tools may take: its saved timeout, or
// DefaultTimeout.
func serverTimeout(srv store.MCPServer) time.Duration {
	if srv.TimeoutSeconds > 0 {
		return time.Duration(srv.TimeoutSeconds) * time.Second
	}
	return DefaultTimeout
}

func spec(srv store.MCPServer, tool *mcp.Tool) agent.ToolSpec {
	schema := json.RawMessage(`{"type":"object","properties":{}}`)
	if tool.InputSchema != nil {
		if raw, err := json.Marshal(tool.InputSchema); err == nil && len(raw) > 0 && raw[0] == '{' {
			schema = raw
		}
	}
	desc := tool.Description
	if r := []rune(desc); len(r) > 1000 {
		desc = string(r[:1000]) + "…"
	}
	if desc == "" {
		desc = tool.Name
	}
	return agent.ToolSpec{Name: exposed(srv.Name, tool.Name),
		Description: fmt.Sprintf("[MCP server %s, tool %s] %s", srv.Name, tool.Name, desc), Parameters: schema}
}

// Call implements agent.Toolbox: it runs the call on its server within the server's deadline
// (a server that does not answer in time is cut off with a tool error that says so) and
// writes the result — text, images, resources — like the app's own tools.
func (s *Service) Call(ctx context.Context, t agent.TurnInfo, c agent.ToolCall, out *agent.ToolOutput) string {
	m, err := s.resolve(ctx, t, c.Name)
	if err != nil {
		if errors.Is(err, fault.ErrForbidden) {
			out.Text("Refused: " + err.Error())
			return agent.StateDenied
		}
		out.Text("Error: " + err.Error())
		return agent.StateError
	}
	// The policy again, after the guard: it may have changed while the call waited.
	if v := Decide(m.srv.Policy, m.tool.Name, s.subject(t)); v.Effect == Deny {
		out.Text(fmt.Sprintf("Refused: the access policy of MCP server %q denies %s (%s).", m.srv.Name, m.tool.Name, v))
		return agent.StateDenied
	}
	timeout := serverTimeout(m.srv)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := m.conn.call(cctx, t, m.tool.Name, c.Input)
	switch {
	case err != nil && ctx.Err() != nil:
		out.Text("Interrupted.")
		return agent.StateInterrupted
	case err != nil && cctx.Err() != nil:
		out.Text(fmt.Sprintf("Error: MCP server %q did not answer %s within %s, so the call was cut off. "+
			"The server may be stuck; try again later or do the task another way (an administrator can raise the server's timeout in Settings → Tools).",
			m.srv.Name, m.tool.Name, timeout))
		return agent.StateError
	case err != nil && (errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed)):
		out.Text(fmt.Sprintf("Error: MCP server %q ended while it ran %s (it is started again at the next call): %v", m.srv.Name, m.tool.Name, err))
		return agent.StateError
	case err != nil:
		out.Text(fmt.Sprintf("Error: MCP server %q: %s: %v", m.srv.Name, m.tool.Name, err))
		return agent.StateError
	}
	write(out, res)
	if w, ok := m.conn.svc.cfg.OnServer.(SandboxWatcher); ok && m.srv.OnServer {
		if notes := w.SandboxRefused(t, ResultText(res)); len(notes) > 0 {
			out.Text("\nsandbox: " + strings.Join(notes, "\nsandbox: "))
		}
	}
	if res.IsError {
		return agent.StateError
	}
	return agent.StateSuccess
}

// ResultText is the text of res's text blocks, one per line.
func ResultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if v, ok := c.(*mcp.TextContent); ok {
			b.WriteString(v.Text)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// maxText bounds the text of one result the model gets.
const maxText = 256 << 10

// write turns a tool result into the chat's result blocks.
func write(out *agent.ToolOutput, res *mcp.CallToolResult) {
	text := 0
	put := func(s string) {
		if text >= maxText {
			return
		}
		if text+len(s) > maxText {
			s = s[:maxText-text] + "\n… (cut: the result is longer than 256 KiB)"
		}
		text += len(s)
		out.Text(s)
	}
	sep := func() {
		if n := len(out.Blocks()); n > 0 && out.Blocks()[n-1].Type == "text" {
			put("\n")
		}
	}
	for _, c := range res.Content {
		switch v := c.(type) {
		case *mcp.TextContent:
			sep()
			put(v.Text)
		case *mcp.ImageContent:
			out.Image(v.MIMEType, base64.StdEncoding.EncodeToString(v.Data))
		case *mcp.AudioContent:
			sep()
			put(fmt.Sprintf("(audio, %s, %d bytes: not shown)", v.MIMEType, len(v.Data)))
		case *mcp.ResourceLink:
			sep()
			put(fmt.Sprintf("Resource %s: %s %s", firstOf(v.Title, v.Name), v.URI, v.Description))
		case *mcp.EmbeddedResource:
			r := v.Resource
			if r == nil {
				continue
			}
			switch {
			case r.Text != "":
				sep()
				put(fmt.Sprintf("Resource %s:\n%s", r.URI, r.Text))
			case strings.HasPrefix(r.MIMEType, "image/") && len(r.Blob) > 0:
				out.Image(r.MIMEType, base64.StdEncoding.EncodeToString(r.Blob))
			default:
				sep()
				put(fmt.Sprintf("Resource %s (%s, %d bytes)", r.URI, r.MIMEType, len(r.Blob)))
			}
		}
	}
	if len(res.Content) == 0 && res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		put(string(raw))
	}
	if len(out.Blocks()) == 0 {
		if res.IsError {
			put("The tool failed without saying why.")
		} else {
			put("Done (no output).")
		}
	}
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// subject is who makes the calls of turn t.
func (s *Service) subject(t agent.TurnInfo) Subject {
	sub := Subject{AgentID: t.AgentID}
	if a, err := s.cfg.Store.Account(t.UserID); err == nil {
		sub.User = a.Username
	}
	return sub
}

// Check is the policy's part of the runtime's guard for an MCP tool: the server's access
// policy for the person and the agent. Ask asks the person through the confirmation flow;
// an answer that comes after AskTimeout is a deny. The tool guard's judgement of the
// arguments is the caller's to add.
func (s *Service) Check(t agent.TurnInfo, c agent.ToolCall) (agent.Decision, string) {
	if t.TaskID != "" {
		return agent.Deny, "task helpers cannot use MCP tools"
	}
	// Resolving may start a stdio server (conn.startTimeout bounds that within this).
	ctx, cancel := context.WithTimeout(context.Background(), MaxTimeout+s.cfg.ConnectTimeout)
	defer cancel()
	m, err := s.resolve(ctx, t, c.Name)
	if err != nil {
		return agent.Deny, err.Error()
	}
	sub := s.subject(t)
	v := Decide(m.srv.Policy, m.tool.Name, sub)
	who := "agent " + t.AgentID
	if sub.User != "" {
		who = "user " + sub.User + ", " + who
	}
	switch v.Effect {
	case Allow:
		return agent.Allow, ""
	case Ask:
		now := s.cfg.Now()
		key := t.UserID + "\x00" + c.ID
		s.mu.Lock()
		asked, ok := s.asked[key]
		if !ok {
			s.asked[key] = now
			for k, at := range s.asked { // forget questions long answered or expired
				if now.Sub(at) > 2*s.cfg.AskTimeout+time.Hour {
					delete(s.asked, k)
				}
			}
		}
		s.mu.Unlock()
		if ok && now.Sub(asked) > s.cfg.AskTimeout {
			return agent.Deny, fmt.Sprintf("nobody confirmed %s of MCP server %q within %s; the call is denied (ask again)",
				m.tool.Name, m.srv.Name, s.cfg.AskTimeout.Round(time.Second))
		}
		return agent.Ask, fmt.Sprintf("MCP server %q: the access policy asks a person before tool %s runs for %s (%s)",
			m.srv.Name, m.tool.Name, who, v)
	}
	return agent.Deny, fmt.Sprintf("MCP server %q: the access policy denies tool %s to %s (%s)", m.srv.Name, m.tool.Name, who, v)
}
