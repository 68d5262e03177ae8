package mcpserver

import (
	"context"
	"encoding/base64"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/apitoken"
	"cubicle/backend/fault"
)

// shotComputers answers every call with one fixed image, as a computer_click's settled
// screenshot.
type shotComputers struct{ blocks []agent.ContentBlock }

func (c shotComputers) List(context.Context, apitoken.Caller) ([]Computer, error) {
	return []Computer{{AgentID: "a", Name: "a", Computer: "vm", State: "running"}}, nil
}

func (c shotComputers) Call(context.Context, apitoken.Caller, string, string, map[string]any) ([]agent.ContentBlock, string, error) {
	return c.blocks, agent.StateSuccess, nil
}

func (c shotComputers) Power(context.Context, apitoken.Caller, string, bool) (string, error) {
	return "", fault.Invalid("no")
}

type oneToken struct{}

func (oneToken) Verify(secret string) (apitoken.Caller, error) {
	if secret != "t" {
		return apitoken.Caller{}, fault.New(fault.ErrUnauthenticated, "bad token")
	}
	return apitoken.Caller{TokenID: "t", AccountID: "acct"}, nil
}

type bearer struct{}

func (bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer t")
	return http.DefaultTransport.RoundTrip(r)
}

// shot is n bytes standing in for a JPEG screenshot, base64 as the tools hand it over.
func shot(n int) string {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func connect(tb testing.TB, blocks []agent.ContentBlock) *mcp.ClientSession {
	_, cs := connectServer(tb, blocks)
	return cs
}

func connectServer(tb testing.TB, blocks []agent.ContentBlock) (*Server, *mcp.ClientSession) {
	s, err := New(Config{Computers: shotComputers{blocks}, Tokens: oneToken{}})
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	tb.Cleanup(hs.Close)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL,
		HTTPClient: &http.Client{Transport: bearer{}}}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return s, cs
}

// BenchmarkClickCall is one computer_click over streamable HTTP on loopback with a 250 KB
// screenshot in the result: what MCP adds to the in-app step.
func BenchmarkClickCall(b *testing.B) {
	for _, off := range []bool{false, true} {
		b.Run(map[bool]string{false: "spliced", true: "sdk"}[off], func(b *testing.B) {
			noSplice = off
			defer func() { noSplice = false }()
			benchClick(b)
		})
	}
}

func benchClick(b *testing.B) {
	cs := connect(b, []agent.ContentBlock{{Type: "image", MediaType: "image/jpeg", Data: shot(250 << 10)}})
	ctx := context.Background()
	b.ReportAllocs()
	cpu, n := cpuTime(), 0
	for b.Loop() {
		n++
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer_click", Arguments: map[string]any{"agent": "a", "x": 10, "y": 20}})
		if err != nil || res.IsError || len(res.Content) != 1 {
			b.Fatal(err, res)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/1e6/float64(n), "cpu-ms/op")
}
