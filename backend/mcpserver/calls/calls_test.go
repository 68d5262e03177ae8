package calls

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/apitoken"
	"cubicle/backend/computer"
	"cubicle/backend/control"
	"cubicle/backend/events"
	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
)

type agents map[string][]store.Agent

func (a agents) List(account string) ([]store.Agent, error) { return a[account], nil }

type noNodes struct{}

func (noNodes) ForAgent(string) (nodeapi.Node, error) { return nil, fault.Unavailable("no nodes here") }

type noControl struct{}

func (noControl) Holder(string) (control.Holder, bool) { return control.Holder{}, false }

type plans struct{ p computer.Plan }

func (p plans) Decide(context.Context, store.Agent, bool) computer.Plan { return p.p }

type bus struct {
	mu  sync.Mutex
	got []events.Confirm
}

func (b *bus) Publish(_ events.Type, _ events.Audience, data any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, data.(events.Confirm))
}

// runtime records the direct calls it is given and answers each after hold.
type runtime struct {
	mu      sync.Mutex
	calls   []agent.DirectCall
	running int
	most    int
	hold    time.Duration
}

func (r *runtime) Call(ctx context.Context, d agent.DirectCall, emit func(agent.Event)) (agent.ContentBlock, error) {
	r.mu.Lock()
	r.calls = append(r.calls, d)
	r.running++
	r.most = max(r.most, r.running)
	r.mu.Unlock()
	emit(agent.Event{Type: agent.RequireUserConfirm, Reason: "asks", ToolCalls: []agent.ToolCall{d.Call}})
	time.Sleep(r.hold)
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	return agent.ContentBlock{Type: "tool_result", State: agent.StateSuccess}, nil
}

// TestCallsReachOnlyTheTokensAgents: an agent is found by id or by name (case aside) among
// the token owner's agents the token names, never another account's or one the token leaves
// out; two agents of one name ask for the id; a call runs as the agent's own direct call in
// the conversation of that token and agent, with the click's button turned into the tool the
// agent's toolbox has (and the cloud twin when the agent's computer is a cloud one); the
// confirmation the runtime asks for is published; calls of one conversation run one at a time.
func TestCallsReachOnlyTheTokensAgents(t *testing.T) {
	ag := agents{
		"acc1": {{ID: "ag1", AccountID: "acc1", Name: "Ada"}, {ID: "ag2", AccountID: "acc1", Name: "Twin"}, {ID: "ag3", AccountID: "acc1", Name: "twin"},
			{ID: "ag4", AccountID: "acc1", Name: "Cloudy"}},
		"acc2": {{ID: "ag9", AccountID: "acc2", Name: "Other"}},
	}
	rt, b := &runtime{hold: 50 * time.Millisecond}, &bus{}
	cloud := plans{computer.Plan{Selected: "cloud", Kind: "cloud", Cloud: true}}
	m, err := New(Config{Agents: ag, Nodes: noNodes{}, Control: noControl{}, Plans: cloud, Events: b, Runtime: rt, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	all := apitoken.Caller{TokenID: "t1", TokenName: "laptop", AccountID: "acc1"}
	only := apitoken.Caller{TokenID: "t2", TokenName: "ci", AccountID: "acc1", Agents: []string{"ag1"}}
	ctx := context.Background()

	list, err := m.List(ctx, only)
	if err != nil || len(list) != 1 || list[0].AgentID != "ag1" || list[0].Computer != "none" {
		t.Fatalf("List for a token naming one agent: %+v, %v", list, err)
	}
	for _, c := range []struct {
		caller apitoken.Caller
		ref    string
		class  error
	}{
		{only, "ag4", fault.ErrNotFound},    // not named by the token
		{all, "ag9", fault.ErrNotFound},     // another account's
		{all, "Other", fault.ErrNotFound},   // by name, another account's
		{all, "twin", fault.ErrInvalid},     // two agents of that name
		{all, "no-such", fault.ErrNotFound}, // nobody
	} {
		if _, _, err := m.Call(ctx, c.caller, c.ref, "computer_screenshot", nil); !errors.Is(err, c.class) {
			t.Errorf("Call on %q: %v, want %v", c.ref, err, c.class)
		}
	}
	if len(rt.calls) != 0 {
		t.Fatalf("refused calls reached the runtime: %+v", rt.calls)
	}

	// By name, case aside; the right button becomes the cloud twin of computer_right_click.
	if _, st, err := m.Call(ctx, all, "CLOUDY", "computer_click", map[string]any{"button": "right", "x": 1}); err != nil || st != agent.StateSuccess {
		t.Fatalf("Call by name: %s, %v", st, err)
	}
	d := rt.calls[0]
	if d.AgentID != "ag4" || d.UserID != "acc1" || d.SessionID != Session("t1", "ag4") || d.Via != "MCP: laptop" ||
		d.Call.Name != computer.PrefixCloud+"right_click" || d.Call.Input["button"] != nil || d.Call.Input["x"] != 1 {
		t.Fatalf("the direct call: %+v", d)
	}
	if len(b.got) != 1 || b.got[0].State != "asked" || b.got[0].Source != "MCP: laptop" || b.got[0].AgentID != "ag4" {
		t.Fatalf("published confirmations: %+v", b.got)
	}

	// One conversation: one call at a time.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := m.Call(ctx, all, "ag1", "computer_screenshot", nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if rt.most != 1 {
		t.Fatalf("%d calls of one conversation ran at once", rt.most)
	}

	if _, err := New(Config{Agents: ag, Nodes: noNodes{}, Control: noControl{}, Plans: cloud, Events: b, Runtime: rt,
		Getenv: func(string) string { return "soon" }}); err == nil || !strings.Contains(err.Error(), "CUBICLE_MCP_CONFIRM_TIMEOUT") {
		t.Fatalf("a confirm timeout that is no duration: %v", err)
	}
}
