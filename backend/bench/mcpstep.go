package bench

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/agent/tools"
	"cubicle/backend/apitoken"
	"cubicle/backend/fault"
	"cubicle/backend/mcpserver"
)

// RowMCPStep is the row of an agent step made by an MCP client over streamable HTTP.
const RowMCPStep = "mcp_step"

// benchComputers runs /mcp's computer tools as direct calls of an agent runtime over the
// benchmark's desktop (mcpserver.Computers), the path backend/mcp.go takes.
type benchComputers struct{ rt *agent.Runtime }

func (c benchComputers) List(context.Context, apitoken.Caller) ([]mcpserver.Computer, error) {
	return []mcpserver.Computer{{AgentID: "bench", Name: "bench", Computer: "vm", State: "running"}}, nil
}

func (c benchComputers) Call(ctx context.Context, _ apitoken.Caller, _, tool string, args map[string]any) ([]agent.ContentBlock, string, error) {
	res, err := c.rt.Call(ctx, agent.DirectCall{SessionID: "bench-mcp", UserID: "bench", AgentID: "bench", Via: "MCP: bench",
		Call: agent.ToolCall{Name: tool, Input: args}}, func(agent.Event) {})
	return res.Content, res.State, err
}

func (c benchComputers) Power(context.Context, apitoken.Caller, string, bool) (string, error) {
	return "", fault.Invalid("not in the benchmark")
}

type benchTokens struct{}

func (benchTokens) Verify(secret string) (apitoken.Caller, error) {
	if secret != "bench" {
		return apitoken.Caller{}, fault.New(fault.ErrUnauthenticated, "bad token")
	}
	return apitoken.Caller{TokenID: "bench", TokenName: "bench", AccountID: "bench"}, nil
}

type bearerBench struct{}

func (bearerBench) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer bench")
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSteps: an MCP client (the official Go SDK) calling computer_click over streamable HTTP on
// loopback — token check, the SDK's server, a direct call of the agent runtime, the tool, the
// settled screenshot back as an MCP image — next to the in-app agent step in the same run.
func (r *runner) mcpSteps(ctx context.Context, d *desktop) error {
	box, err := tools.New(tools.Config{Desktops: benchDesktops{d.client}, Environments: benchEnv{}, Logger: r.log})
	if err != nil {
		return err
	}
	rt, err := agent.New(agent.Config{Tools: box})
	if err != nil {
		return err
	}
	srv, err := mcpserver.New(mcpserver.Config{Computers: benchComputers{rt}, Tokens: benchTokens{}})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "cubicle-bench", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String() + "/mcp",
		HTTPClient: &http.Client{Transport: bearerBench{}}}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	turn := agent.TurnInfo{SessionID: "bench", UserID: "bench", AgentID: "bench", TurnID: "bench"}
	// Every click of the row moves the pointer, as every step of the agent_step row does: the
	// MCP steps click one point, the in-app steps the other (the warm-up the in-app one). A
	// click where the pointer already is leaves the screen still, and its settle wait is shorter
	// (about 20 ms here) than a click that moves it.
	viaMCP := func(p [2]int) func() error {
		return func() error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer_click", Arguments: map[string]any{"agent": "bench", "x": p[0], "y": p[1]}})
			if err != nil {
				return err
			}
			if res.IsError {
				return fault.Unavailable("computer_click over MCP failed")
			}
			return nil
		}
	}
	inApp := func(p [2]int) func() error {
		return func() error {
			out := agent.NewToolOutput("bench", func(agent.Event) {})
			in := map[string]any{"x": float64(p[0]), "y": float64(p[1])}
			if st := box.Call(ctx, turn, agent.ToolCall{ID: "bench", Name: "computer_click", Input: in}, out); st != agent.StateSuccess {
				return fault.Unavailable("computer_click ended %s", st)
			}
			return nil
		}
	}
	if err := viaMCP(clickPoints[0])(); err != nil {
		return err
	}
	var o, p []float64
	if err := interleave(ctx, r.cfg.Counts.AgentSteps, r.cfg.Counts.AgentSteps,
		func(int) error { return timed(&o, viaMCP(clickPoints[1])) },
		func(int) error { return timed(&p, inApp(clickPoints[0])) }); err != nil {
		return err
	}
	r.add(Row{ID: RowMCPStep, Title: "MCP step: click + screenshot after it, over streamable HTTP", Unit: UnitMS, Better: "lower",
		Ours: Side{Method: "an MCP client (official Go SDK) calling computer_click on /mcp over loopback HTTP: bearer token, " +
			"the SDK's streamable server, a direct call of the agent runtime, the tool, the settled JPEG back as an MCP image", Samples: o},
		PeerName: "in-app agent_step", Peer: &Side{Method: "the agent's computer_click tool called in-process (the agent_step row's method)", Samples: p},
		Note: "the target is at most 10 ms p50 more than the in-app step; every click on both sides moves the pointer (the two sides click two points in turn)"})
	return nil
}
