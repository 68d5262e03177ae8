// Package anthropic is the runtime's client of Anthropic's Messages API (through
// github.com/anthropics/anthropic-sdk-go): streaming, the native computer tool (computer_20250124
// or computer_20251124 by model, with its beta header), bash mapped to the desktop's shell tool,
// the text editor tool mapped to its file tools, every other tool as a normal tool; screenshots
// scaled to the size Anthropic recommends and every coordinate mapped back to the screen;
// extended thinking; prompt caching on tools, system and the newest turns; retries of rate
// limits and overloads with HINT_BLOCK notices; a stream that breaks or goes silent ends the
// call with agent.ErrStreamBroken.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"cubicle/backend/agent"
	"cubicle/backend/agent/native"
	"cubicle/backend/egress"
	"cubicle/backend/fault"
)

// DefaultBaseURL is Anthropic's API.
const DefaultBaseURL = "https://api.anthropic.com"

// Config names an endpoint and a model. Model is required.
type Config struct {
	BaseURL      string // "" = DefaultBaseURL; a trailing /v1 is accepted
	APIKey       string
	Model        string // e.g. "claude-sonnet-4-5"
	AllowPrivate bool   // the endpoint may be a loopback or private address
	HTTP         *http.Client
	MaxTokens    int // per reply; default 8192
	// Thinking is the extended-thinking budget in tokens for models that think (Claude 3.7
	// and 4+); 0 = the default 2048, negative = off.
	Thinking int
	// KeepScreenshots is how many of the newest screenshots are sent (older ones become a
	// note); default 3. A context-too-long answer retries with fewer.
	KeepScreenshots int
	// Screen is the desktop size assumed before the conversation's first screenshot.
	Screen native.Size
	// Attempts is how many times a rate-limited or overloaded call is tried; default 4.
	// RetryBase is the first backoff (doubling), RetryMax the longest wait.
	Attempts            int
	RetryBase, RetryMax time.Duration
	// Idle ends a call whose stream stays silent this long; default 90 s.
	Idle time.Duration
}

// Client talks to one model.
type Client struct {
	cfg    Config
	client sdk.Client
	tools  Tools
	shrink native.Shrinker
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, fault.Invalid("name the Anthropic model (for example claude-sonnet-4-5)")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	base := strings.TrimSuffix(strings.TrimRight(cfg.BaseURL, "/"), "/v1")
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 8192
	}
	if cfg.Thinking == 0 {
		cfg.Thinking = 2048
	}
	if cfg.KeepScreenshots <= 0 {
		cfg.KeepScreenshots = 3
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
	c := &Client{cfg: cfg, tools: ToolsFor(cfg.Model)}
	// Nothing comes from the server's environment (ANTHROPIC_* variables): the endpoint and key
	// are the saved settings. The key goes in x-api-key, as the API documents it.
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithBaseURL(base + "/"), option.WithHTTPClient(hc),
		option.WithMaxRetries(0)} // retried here, with a notice to the person
	if cfg.APIKey != "" {
		opts = append(opts, option.WithHeader("x-api-key", cfg.APIKey))
	}
	c.client = sdk.NewClient(opts...)
	return c, nil
}

// Name is the model's name.
func (c *Client) Name() string { return c.cfg.Model }

// Tools are the versions of Anthropic's tools a model was trained on.
type Tools struct {
	Computer, Beta   string // "computer_20250124", "computer-use-2025-01-24"
	Bash             string // "bash_20250124"
	Editor, EditName string // "text_editor_20250728", "str_replace_based_edit_tool"
	Thinks           bool   // supports extended thinking
}

var modelVersion = regexp.MustCompile(`claude-(?:(opus|sonnet|haiku)-)?(\d+)(?:[-.](\d))?(?:-(opus|sonnet|haiku))?`)

// ToolsFor returns the tool versions for a model name: computer_20251124 for Claude Opus 4.5
// and every model from 4.6 on; computer_20250124 for Claude 4, 4.1, Sonnet/Haiku 4.5 and 3.7;
// computer_20241022 for Claude 3.5. Unknown names get the 2025-01-24 set.
func ToolsFor(model string) Tools {
	t := Tools{Computer: "computer_20250124", Beta: "computer-use-2025-01-24", Bash: "bash_20250124",
		Editor: "text_editor_20250728", EditName: "str_replace_based_edit_tool", Thinks: true}
	m := modelVersion.FindStringSubmatch(strings.ToLower(model))
	if m == nil {
		return t
	}
	family := m[1] + m[4]
	major, _ := strconv.Atoi(m[2])
	minor := 0
	if m[3] != "" {
		minor, _ = strconv.Atoi(m[3])
	}
	switch {
	case major >= 5 || major == 4 && (minor >= 6 || minor == 5 && family == "opus"):
		t.Computer, t.Beta = "computer_20251124", "computer-use-2025-11-24"
	case major == 3 && minor == 7:
		t.Editor, t.EditName = "text_editor_20250124", "str_replace_editor"
	case major == 3:
		t = Tools{Computer: "computer_20241022", Beta: "computer-use-2024-10-22", Bash: "bash_20241022",
			Editor: "text_editor_20241022", EditName: "str_replace_editor"}
	}
	return t
}

// Bounds of one reply.
const (
	MaxToolCalls    = 64
	MaxToolArgBytes = 1 << 20
	MaxTextBytes    = 4 << 20
)

// Stream implements agent.Model.
func (c *Client) Stream(ctx context.Context, req agent.ModelRequest, onDelta func(agent.ModelDelta)) (agent.ModelReply, error) {
	keep := c.cfg.KeepScreenshots
	var reply agent.ModelReply
	start := time.Now()
	for {
		var err error
		started := false
		err = native.Backoff(ctx, c.cfg.Attempts, c.cfg.RetryBase, c.cfg.RetryMax, func(err error) native.Retry {
			if started {
				return native.Retry{} // what was shown is not shown twice
			}
			return classifyRetry(err)
		}, func(h string) { onDelta(agent.ModelDelta{Hint: h}) }, func() error {
			var err error
			reply, err = c.once(ctx, req, keep, func(d agent.ModelDelta) {
				started = true
				onDelta(d)
			})
			return err
		})
		reply.Usage.Time = time.Since(start).Seconds()
		if err != nil && tooLong(err) && !started && keep > 0 {
			keep /= 2 // 3 → 1 → 0: older screenshots go first
			onDelta(agent.ModelDelta{Hint: "The conversation is longer than the model's context window; sending it again with fewer screenshots."})
			continue
		}
		if err != nil {
			return reply, c.explain(ctx, err)
		}
		return reply, nil
	}
}

// Test makes one tiny request (one output token) and says what failed.
func (c *Client) Test(ctx context.Context) error {
	raw, _ := json.Marshal(request{Model: c.cfg.Model, MaxTokens: 1,
		Messages: []message{{Role: "user", Content: []block{{Type: "text", Text: "ping"}}}}})
	_, err := c.client.Beta.Messages.New(ctx, sdk.BetaMessageNewParams{}, option.WithRequestBody("application/json", raw))
	if err != nil {
		return c.explain(ctx, err)
	}
	return nil
}

// once makes one streamed call.
func (c *Client) once(ctx context.Context, req agent.ModelRequest, keep int, onDelta func(agent.ModelDelta)) (agent.ModelReply, error) {
	var reply agent.ModelReply
	body, conv := c.request(req, keep)
	body.Stream = true
	raw, err := json.Marshal(body)
	if err != nil {
		return reply, fmt.Errorf("model request: %w", err)
	}
	// The body is sent as built (the SDK's typed params would drop what they do not model);
	// the SDK does the transport, headers, event decoding and errors.
	var params sdk.BetaMessageNewParams
	if conv.computer.Offered {
		params.Betas = append(params.Betas, c.tools.Beta)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := native.NewIdle(c.cfg.Idle, cancel)
	defer idle.Stop()
	stream := c.client.Beta.Messages.NewStreaming(cctx, params, option.WithRequestBody("application/json", raw))
	defer stream.Close()

	type block struct {
		kind, id, name, sig, redacted string
		text, args                    strings.Builder
	}
	var blocks []*block
	var text, thinking strings.Builder
	stopped := false
	calls := 0
	for stream.Next() {
		idle.Touch()
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			u := ev.Message.Usage
			reply.Usage.InputTokens = int(u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens)
			reply.Usage.CachedTokens = int(u.CacheReadInputTokens)
			reply.Usage.OutputTokens = int(u.OutputTokens)
		case "content_block_start":
			i := int(ev.Index)
			if i < 0 || i >= 4*MaxToolCalls {
				return reply, fault.Unavailable("the model sent content block index %d", i)
			}
			for len(blocks) <= i {
				blocks = append(blocks, &block{})
			}
			cb := ev.ContentBlock
			b := blocks[i]
			b.kind = cb.Type
			switch cb.Type {
			case "tool_use":
				if calls++; calls > MaxToolCalls {
					return reply, fault.Unavailable("the model asked for more than %d tool calls in one reply", MaxToolCalls)
				}
				b.id, b.name = cb.ID, cb.Name
				onDelta(agent.ModelDelta{ToolIndex: i, ToolID: cb.ID, ToolName: conv.displayName(cb.Name)})
			case "redacted_thinking":
				b.redacted = cb.Data
			case "text":
				if cb.Text != "" {
					b.text.WriteString(cb.Text)
					text.WriteString(cb.Text)
					onDelta(agent.ModelDelta{Text: cb.Text})
				}
			}
		case "content_block_delta":
			i := int(ev.Index)
			if i < 0 || i >= len(blocks) {
				return reply, fault.Unavailable("the model sent a delta for content block %d before starting it", i)
			}
			b, d := blocks[i], ev.Delta
			switch d.Type {
			case "text_delta":
				if text.Len()+len(d.Text) > MaxTextBytes {
					return reply, fault.Unavailable("the model's reply is longer than %d MiB", MaxTextBytes>>20)
				}
				b.text.WriteString(d.Text)
				text.WriteString(d.Text)
				onDelta(agent.ModelDelta{Text: d.Text})
			case "thinking_delta":
				if thinking.Len()+len(d.Thinking) > MaxTextBytes {
					return reply, fault.Unavailable("the model's thinking is longer than %d MiB", MaxTextBytes>>20)
				}
				b.text.WriteString(d.Thinking)
				thinking.WriteString(d.Thinking)
				onDelta(agent.ModelDelta{Thinking: d.Thinking})
			case "signature_delta":
				b.sig += d.Signature
			case "input_json_delta":
				if b.args.Len()+len(d.PartialJSON) > MaxToolArgBytes {
					return reply, fault.Unavailable("the model sent more than %d KiB of arguments for one tool call", MaxToolArgBytes>>10)
				}
				b.args.WriteString(d.PartialJSON)
				// The runtime shows the model's own form of the call while it streams.
				onDelta(agent.ModelDelta{ToolIndex: i, ToolArgs: d.PartialJSON})
			}
		case "message_delta":
			if ev.Delta.StopReason != "" {
				reply.FinishReason = string(ev.Delta.StopReason)
			}
			if ev.Usage.OutputTokens > 0 {
				reply.Usage.OutputTokens = int(ev.Usage.OutputTokens)
			}
		case "message_stop":
			stopped = true
		}
	}
	reply.Text, reply.Thinking = text.String(), thinking.String()
	reply.Usage.TotalTokens = reply.Usage.InputTokens + reply.Usage.OutputTokens
	if err := stream.Err(); err != nil || !stopped {
		switch {
		case ctx.Err() != nil:
			return reply, ctx.Err()
		case idle.Fired():
			return reply, fmt.Errorf("%w: nothing arrived for %s", agent.ErrStreamBroken, c.cfg.Idle)
		case err != nil && apiError(err) != nil:
			return reply, err // an error event: classified by the caller
		case err != nil:
			return reply, fmt.Errorf("%w: %v", agent.ErrStreamBroken, err)
		}
		return reply, fmt.Errorf("%w before its end (no message_stop)", agent.ErrStreamBroken)
	}
	for _, b := range blocks {
		switch b.kind {
		case "thinking":
			reply.Blocks = append(reply.Blocks, agent.ContentBlock{Type: "thinking", Text: b.text.String(), Meta: map[string]any{"signature": b.sig}})
		case "redacted_thinking":
			reply.Blocks = append(reply.Blocks, agent.ContentBlock{Type: "thinking", Meta: map[string]any{"redacted": b.redacted}})
		case "tool_use":
			in := map[string]any{}
			if s := strings.TrimSpace(b.args.String()); s != "" {
				if err := json.Unmarshal([]byte(s), &in); err != nil {
					in = map[string]any{"_raw": s, "_error": "arguments are not a JSON object"}
				}
			}
			reply.ToolCalls = append(reply.ToolCalls, conv.toRuntime(b.id, b.name, in))
		}
	}
	if reply.FinishReason == "refusal" && reply.Text == "" {
		reply.Text = "(The model declined to continue.)"
	}
	return reply, nil
}

// apiError returns err's *sdk.Error, or nil.
func apiError(err error) *sdk.Error {
	var e *sdk.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

func errType(e *sdk.Error) string {
	if t := string(e.Type()); t != "" {
		return t
	}
	var body struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	json.Unmarshal([]byte(e.RawJSON()), &body)
	return body.Error.Type
}

// classifyRetry: 429, 529 (overloaded) and 5xx are retried, after the server's retry-after.
func classifyRetry(err error) native.Retry {
	e := apiError(err)
	if e == nil {
		return native.Retry{}
	}
	r := native.Retry{}
	if e.Response != nil {
		r.After = native.RetryAfter(e.Response.Header.Get)
	}
	switch t := errType(e); {
	case e.StatusCode == 429 || t == "rate_limit_error":
		r.OK, r.Why = true, "rate limited (HTTP 429)"
	case e.StatusCode == 529 || t == "overloaded_error":
		r.OK, r.Why = true, "overloaded (HTTP 529)"
	case e.StatusCode >= 500 || t == "api_error":
		r.OK, r.Why = true, fmt.Sprintf("failing (HTTP %d)", e.StatusCode)
	}
	return r
}

// tooLong reports a request larger than the context window (or the request size limit).
func tooLong(err error) bool {
	e := apiError(err)
	if e == nil {
		return false
	}
	msg := strings.ToLower(e.Message + " " + e.RawJSON())
	return e.StatusCode == 413 || e.StatusCode == 400 && (strings.Contains(msg, "prompt is too long") ||
		strings.Contains(msg, "context window") || strings.Contains(msg, "too many tokens") || strings.Contains(msg, "context length"))
}

// explain turns an API error into a classified one that says what to fix.
func (c *Client) explain(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, agent.ErrStreamBroken) {
		return err
	}
	e := apiError(err)
	if e == nil {
		if errors.Is(err, fault.ErrForbidden) {
			return fault.Forbidden("the model at %s: %v", c.cfg.BaseURL, err)
		}
		if fault.Class(err) != nil {
			return err
		}
		return fault.Unavailable("cannot reach the Anthropic API at %s: %v", c.cfg.BaseURL, err)
	}
	msg := e.Message
	if msg == "" {
		msg = strings.TrimSpace(e.RawJSON())
	}
	t := errType(e)
	switch {
	case e.StatusCode == 401:
		return fault.Forbidden("the API key was refused by %s (HTTP 401 %s: %s): enter a valid Anthropic API key", c.cfg.BaseURL, t, msg)
	case e.StatusCode == 403:
		return fault.Forbidden("the API key may not use model %s (HTTP 403 %s: %s)", c.cfg.Model, t, msg)
	case e.StatusCode == 404:
		return fault.Invalid("the model %q was not found at %s (HTTP 404 %s: %s): check the model name", c.cfg.Model, c.cfg.BaseURL, t, msg)
	case e.StatusCode == 429:
		return fault.Unavailable("rate limit or quota exceeded for model %s (HTTP 429 %s: %s); tried %d times", c.cfg.Model, t, msg, c.cfg.Attempts)
	case e.StatusCode == 529 || t == "overloaded_error":
		return fault.Unavailable("Anthropic's API is overloaded (%s: %s); tried %d times — try again later", t, msg, c.cfg.Attempts)
	case tooLong(err):
		return fault.Invalid("the conversation is too long for model %s even without screenshots (%s): start a new chat", c.cfg.Model, msg)
	case e.StatusCode == 400:
		return fault.Invalid("the model %s refused the request (HTTP 400 %s: %s)", c.cfg.Model, t, msg)
	}
	return fault.Unavailable("the model %s answered HTTP %d (%s: %s)", c.cfg.Model, e.StatusCode, t, msg)
}

var _ agent.Model = (*Client)(nil)

// Models lists the models the key may use (GET /v1/models), newest first as the API gives
// them; the settings' picker offers them.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	var out []string
	pager := c.client.Models.ListAutoPaging(ctx, sdk.ModelListParams{Limit: sdk.Int(1000)})
	for pager.Next() && len(out) < 500 {
		out = append(out, pager.Current().ID)
	}
	if err := pager.Err(); err != nil {
		return nil, c.explain(ctx, err)
	}
	return out, nil
}
