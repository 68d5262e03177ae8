// Package responses is the runtime's client of OpenAI's Responses API (through
// github.com/openai/openai-go): streaming; for computer-use models the computer_use_preview
// tool (each computer_call becomes the runtime's computer tool call in screen pixels, answered
// with a computer_call_output screenshot); pending_safety_checks make the call wait for a
// person's confirmation (the runtime's REQUIRE_USER_CONFIRM) and are acknowledged only when a
// person confirmed; reasoning summaries become THINKING events; every other tool is a function
// tool. Turns chain with previous_response_id (the response id is kept in the assistant
// message's metadata), with truncation "auto".
package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3/option"
	oresp "github.com/openai/openai-go/v3/responses"

	"cubicle/backend/agent"
	"cubicle/backend/agent/native"
	"cubicle/backend/agent/openai"
	"cubicle/backend/egress"
	"cubicle/backend/fault"
)

// Config names an endpoint and a model. BaseURL and Model are required.
type Config struct {
	BaseURL      string // e.g. "https://api.openai.com/v1"
	APIKey       string
	Model        string // e.g. "computer-use-preview"
	AllowPrivate bool
	HTTP         *http.Client
	// Screen is the desktop size assumed before the conversation's first screenshot.
	Screen native.Size
	// Attempts is how many times a rate-limited call is tried (default 4); RetryBase the first
	// backoff, RetryMax the longest wait.
	Attempts            int
	RetryBase, RetryMax time.Duration
	// Idle ends a call whose stream stays silent this long; default 90 s.
	Idle time.Duration
}

// Client talks to one model.
type Client struct {
	cfg Config
	// responses is the SDK's Responses service alone, not its whole client: the client's
	// package holds every other OpenAI service too and is the longest compile of a fresh
	// build (docs/providers.md).
	responses oresp.ResponseService
	// list lists the models: GET /models, as every OpenAI-compatible endpoint answers it.
	list   *openai.Client
	shrink native.Shrinker
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || strings.TrimSpace(cfg.Model) == "" {
		return nil, fault.Invalid("the model needs a base URL and a model name (for example computer-use-preview)")
	}
	if cfg.Screen.W <= 0 || cfg.Screen.H <= 0 {
		cfg.Screen = native.DefaultScreen
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 4
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = time.Second
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = time.Minute
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 90 * time.Second
	}
	hc := cfg.HTTP
	if hc == nil {
		hc = egress.ModelClient(cfg.AllowPrivate)
	}
	list, err := openai.New(openai.Config{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Model: cfg.Model, HTTP: hc})
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, list: list}
	c.responses = oresp.NewResponseService(option.WithBaseURL(strings.TrimRight(cfg.BaseURL, "/")+"/"), option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(hc), option.WithMaxRetries(0))
	return c, nil
}

// Name is the model's name.
func (c *Client) Name() string { return c.cfg.Model }

// computerModel reports whether the model takes the computer_use_preview tool.
func (c *Client) computerModel() bool {
	return strings.Contains(strings.ToLower(c.cfg.Model), "computer-use")
}

// reasons reports whether the model takes reasoning options.
func (c *Client) reasons() bool {
	m := strings.ToLower(c.cfg.Model)
	return c.computerModel() || strings.HasPrefix(m, "o") || strings.HasPrefix(m, "gpt-5")
}

// Stream implements agent.Model.
func (c *Client) Stream(ctx context.Context, req agent.ModelRequest, onDelta func(agent.ModelDelta)) (agent.ModelReply, error) {
	var reply agent.ModelReply
	start := time.Now()
	started := false
	err := native.Backoff(ctx, c.cfg.Attempts, c.cfg.RetryBase, c.cfg.RetryMax, func(err error) native.Retry {
		if started {
			return native.Retry{}
		}
		return classifyRetry(err)
	}, func(h string) { onDelta(agent.ModelDelta{Hint: h}) }, func() error {
		var err error
		reply, err = c.once(ctx, req, func(d agent.ModelDelta) {
			started = true
			onDelta(d)
		})
		return err
	})
	reply.Usage.Time = time.Since(start).Seconds()
	if err != nil {
		return reply, c.explain(ctx, err)
	}
	return reply, nil
}

// Test makes one tiny request and says what failed.
func (c *Client) Test(ctx context.Context) error {
	raw, _ := json.Marshal(map[string]any{"model": c.cfg.Model, "input": "ping", "max_output_tokens": 16, "store": false})
	if _, err := c.responses.New(ctx, oresp.ResponseNewParams{}, option.WithRequestBody("application/json", raw)); err != nil {
		return c.explain(ctx, err)
	}
	return nil
}

// item is an output item as the stream delivers it.
type item struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Action    map[string]any  `json:"action"`
	Checks    []safetyCheck   `json:"pending_safety_checks"`
	Summary   []summary       `json:"summary"`
	Content   []outputContent `json:"content"`
}

type safetyCheck struct {
	ID      string `json:"id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

type summary struct {
	Text string `json:"text"`
}

type outputContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (c *Client) once(ctx context.Context, req agent.ModelRequest, onDelta func(agent.ModelDelta)) (agent.ModelReply, error) {
	var reply agent.ModelReply
	body, cv := c.request(req)
	raw, err := json.Marshal(body)
	if err != nil {
		return reply, fmt.Errorf("model request: %w", err)
	}
	// The body is sent as built (the SDK's typed params would drop what they do not model);
	// the SDK does the transport, headers, event decoding and errors.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := native.NewIdle(c.cfg.Idle, cancel)
	defer idle.Stop()
	stream := c.responses.NewStreaming(cctx, oresp.ResponseNewParams{}, option.WithRequestBody("application/json", raw))
	defer stream.Close()
	var text, thinking strings.Builder
	var items []item
	done := false
	calls := 0
	for stream.Next() {
		idle.Touch()
		ev := stream.Current()
		switch ev.Type {
		case "response.created":
			reply.Meta = map[string]any{"responseId": ev.Response.ID}
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
			onDelta(agent.ModelDelta{Text: ev.Delta})
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			thinking.WriteString(ev.Delta)
			onDelta(agent.ModelDelta{Thinking: ev.Delta})
		case "response.output_item.added":
			var it item
			json.Unmarshal([]byte(ev.Item.RawJSON()), &it)
			if it.Type == "function_call" || it.Type == "computer_call" {
				if calls++; calls > 64 {
					return reply, fault.Unavailable("the model asked for more than 64 tool calls in one reply")
				}
				onDelta(agent.ModelDelta{ToolIndex: int(ev.OutputIndex), ToolID: it.CallID, ToolName: firstNonEmpty(it.Name, "computer")})
			}
		case "response.function_call_arguments.delta":
			onDelta(agent.ModelDelta{ToolIndex: int(ev.OutputIndex), ToolArgs: ev.Delta})
		case "response.output_item.done":
			var it item
			if err := json.Unmarshal([]byte(ev.Item.RawJSON()), &it); err != nil {
				return reply, fault.Unavailable("the model sent a malformed output item: %v", err)
			}
			items = append(items, it)
		case "response.completed", "response.incomplete":
			done = true
			u := ev.Response.Usage
			reply.Usage.InputTokens, reply.Usage.OutputTokens = int(u.InputTokens), int(u.OutputTokens)
			reply.Usage.CachedTokens, reply.Usage.TotalTokens = int(u.InputTokensDetails.CachedTokens), int(u.TotalTokens)
			reply.FinishReason = string(ev.Response.Status)
			if ev.Type == "response.incomplete" {
				reply.FinishReason = "incomplete: " + ev.Response.IncompleteDetails.Reason
			}
			if reply.Meta == nil && ev.Response.ID != "" {
				reply.Meta = map[string]any{"responseId": ev.Response.ID}
			}
		case "response.failed":
			return reply, fault.Unavailable("the model failed: %s (%s)", ev.Response.Error.Message, ev.Response.Error.Code)
		case "error":
			return reply, &streamError{code: ev.Code, msg: ev.Message}
		}
	}
	reply.Text, reply.Thinking = text.String(), thinking.String()
	if err := stream.Err(); err != nil || !done {
		switch {
		case ctx.Err() != nil:
			return reply, ctx.Err()
		case idle.Fired():
			return reply, fmt.Errorf("%w: nothing arrived for %s", agent.ErrStreamBroken, c.cfg.Idle)
		case err != nil && apiError(err) != nil:
			return reply, err
		case err != nil:
			return reply, fmt.Errorf("%w: %v", agent.ErrStreamBroken, err)
		}
		return reply, fmt.Errorf("%w before its end (no response.completed)", agent.ErrStreamBroken)
	}
	for _, it := range items {
		switch it.Type {
		case "function_call":
			in := map[string]any{}
			if s := strings.TrimSpace(it.Arguments); s != "" {
				if err := json.Unmarshal([]byte(s), &in); err != nil {
					in = map[string]any{"_raw": s, "_error": "arguments are not a JSON object"}
				}
			}
			reply.ToolCalls = append(reply.ToolCalls, agent.ToolCall{ID: it.CallID, Name: it.Name, Input: in})
		case "computer_call":
			reply.ToolCalls = append(reply.ToolCalls, cv.computerCall(it))
		}
	}
	return reply, nil
}

// streamError is an error event of the stream.
type streamError struct{ code, msg string }

func (e *streamError) Error() string {
	return fmt.Sprintf("the model reported an error: %s (%s)", e.msg, e.code)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func apiError(err error) *oresp.Error {
	var e *oresp.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

func classifyRetry(err error) native.Retry {
	var se *streamError
	if errors.As(err, &se) && (strings.Contains(se.code, "rate_limit") || strings.Contains(se.code, "server_error") || strings.Contains(se.code, "overloaded")) {
		return native.Retry{OK: true, Why: "busy (" + se.code + ")"}
	}
	e := apiError(err)
	if e == nil {
		return native.Retry{}
	}
	r := native.Retry{}
	if e.Response != nil {
		r.After = native.RetryAfter(e.Response.Header.Get)
	}
	switch {
	case e.StatusCode == 429 && e.Code != "insufficient_quota":
		r.OK, r.Why = true, "rate limited (HTTP 429)"
	case e.StatusCode >= 500:
		r.OK, r.Why = true, fmt.Sprintf("failing or overloaded (HTTP %d)", e.StatusCode)
	}
	return r
}

func (c *Client) explain(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, agent.ErrStreamBroken) {
		return err
	}
	e := apiError(err)
	if e == nil {
		if fault.Class(err) != nil {
			return err
		}
		if errors.Is(err, fault.ErrForbidden) {
			return fault.Forbidden("the model at %s: %v", c.cfg.BaseURL, err)
		}
		var se *streamError
		if errors.As(err, &se) {
			return fault.Unavailable("%v", err)
		}
		return fault.Unavailable("cannot reach the model at %s: %v", c.cfg.BaseURL, err)
	}
	msg := e.Message
	switch {
	case e.StatusCode == 401:
		return fault.Forbidden("the API key was refused by %s (HTTP 401 %s: %s): enter a valid OpenAI API key", c.cfg.BaseURL, e.Code, msg)
	case e.StatusCode == 403:
		return fault.Forbidden("the API key may not use model %s (HTTP 403 %s: %s)", c.cfg.Model, e.Code, msg)
	case e.StatusCode == 404:
		return fault.Invalid("the model %q was not found at %s (HTTP 404 %s: %s): check the model name", c.cfg.Model, c.cfg.BaseURL, e.Code, msg)
	case e.StatusCode == 429 && e.Code == "insufficient_quota":
		return fault.Unavailable("the account's quota is used up (HTTP 429 insufficient_quota: %s): check the plan and billing", msg)
	case e.StatusCode == 429:
		return fault.Unavailable("rate limit exceeded for model %s (HTTP 429 %s: %s); tried %d times", c.cfg.Model, e.Code, msg, c.cfg.Attempts)
	case e.Code == "context_length_exceeded":
		return fault.Invalid("the conversation is too long for model %s (%s): start a new chat", c.cfg.Model, msg)
	case e.StatusCode == 400:
		return fault.Invalid("the model %s refused the request (HTTP 400 %s: %s)", c.cfg.Model, e.Code, msg)
	}
	return fault.Unavailable("the model %s answered HTTP %d (%s: %s)", c.cfg.Model, e.StatusCode, e.Code, msg)
}

var _ agent.Model = (*Client)(nil)

// Models lists the models the key may use (GET /v1/models), sorted; the settings' picker offers
// them.
func (c *Client) Models(ctx context.Context) ([]string, error) { return c.list.Models(ctx) }
