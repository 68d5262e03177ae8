package cli

import (
	"context"
	"encoding/base64"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
	"cubicle/backend/apitoken"
	"cubicle/backend/fault"
	"cubicle/backend/mcpserver"
)

// fakeComputers answers /mcp's tools without a desktop: the bridge is what is under test.
type fakeComputers struct{ calls []string }

func (f *fakeComputers) List(context.Context, apitoken.Caller) ([]mcpserver.Computer, error) {
	return []mcpserver.Computer{{AgentID: "a1", Name: "Ada", Computer: "vm", State: "running"}}, nil
}

func (f *fakeComputers) Call(_ context.Context, c apitoken.Caller, ref, tool string, args map[string]any) ([]agent.ContentBlock, string, error) {
	f.calls = append(f.calls, c.TokenName+" "+ref+" "+tool)
	return []agent.ContentBlock{{Type: "text", Text: "clicked"}, {Type: "image", MediaType: "image/jpeg", Data: base64.StdEncoding.EncodeToString([]byte("jpeg"))}}, agent.StateSuccess, nil
}

func (f *fakeComputers) Power(context.Context, apitoken.Caller, string, bool) (string, error) {
	return "started", nil
}

type oneToken struct{}

func (oneToken) Verify(secret string) (apitoken.Caller, error) {
	if secret != "cbt_good" {
		return apitoken.Caller{}, fault.New(fault.ErrUnauthenticated, "unknown or revoked API token")
	}
	return apitoken.Caller{TokenID: "t1", TokenName: "laptop", AccountID: "u1"}, nil
}

type pipeRW struct {
	io.Reader
	io.WriteCloser
}

// TestMCPBridge runs `cubicle mcp` against a real /mcp handler and drives it over its stdio
// with the official Go SDK client: the server's tools are offered as they are and calls
// (text and images) go through with the token; a bad token fails at start, saying what to do.
func TestMCPBridge(t *testing.T) {
	fc := &fakeComputers{}
	srv, err := mcpserver.New(mcpserver.Config{Computers: fc, Tokens: oneToken{}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	inR, inW := io.Pipe()   // client → bridge stdin
	outR, outW := io.Pipe() // bridge stdout → client
	var stderr strings.Builder
	e := &env{stdin: inR, stdout: outW, stderr: &stderr, getenv: func(k string) string {
		if k == "CUBICLE_TOKEN" {
			return "cbt_good"
		}
		return ""
	}}
	done := make(chan int, 1)
	bctx, bcancel := context.WithCancel(ctx)
	go func() { done <- run(bctx, e, []string{"mcp", "--server", hs.URL}) }()
	client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("%v (stderr: %s)", err, stderr.String())
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != len(mcpserver.ToolNames()) {
		t.Fatalf("tools: %v %d", err, len(tools.Tools))
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer_click", Arguments: map[string]any{"agent": "Ada", "x": 1, "y": 2}})
	if err != nil || res.IsError || len(res.Content) != 2 {
		t.Fatalf("click: %v %+v", err, res)
	}
	if im, ok := res.Content[1].(*mcp.ImageContent); !ok || string(im.Data) != "jpeg" || im.MIMEType != "image/jpeg" {
		t.Fatalf("image: %+v", res.Content[1])
	}
	if len(fc.calls) != 1 || fc.calls[0] != "laptop Ada computer_click" {
		t.Fatalf("calls: %v", fc.calls)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer_click", Arguments: map[string]any{"x": 1, "y": 2}})
	if err != nil || !res.IsError {
		t.Fatalf("a call without an agent: %v %+v", err, res)
	}
	cs.Close()
	bcancel()
	inW.Close()
	<-done

	// A bad token: the bridge does not start, and says what to do.
	stderr.Reset()
	e2 := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }}
	if code := run(ctx, e2, []string{"mcp", "--server", hs.URL, "--token", "cbt_bad"}); code == 0 || !strings.Contains(stderr.String(), "token") {
		t.Fatalf("bad token: exit %d, %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run(ctx, e2, []string{"mcp", "--server", hs.URL}); code == 0 || !strings.Contains(stderr.String(), "API tokens") {
		t.Fatalf("no token: exit %d, %s", code, stderr.String())
	}
}
