// Package openai is a client of OpenAI-compatible chat-completions endpoints (OpenAI, vLLM,
// Ollama, LiteLLM, …): streaming, tool calls, and images in tool results (screenshots are sent
// as image_url data URIs in a user message following the tool message, which every
// compatible server accepts).
package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/agent/native"
	"cubicle/backend/egress"
	"cubicle/backend/fault"
)

// Config names an endpoint and a model. BaseURL and Model are required.
type Config struct {
	BaseURL string // e.g. "https://api.openai.com/v1"
	APIKey  string
	Model   string
	// AllowPrivate lets the endpoint be a loopback or private address (an administrator's
	// allowance); otherwise every connection to such an address is refused when it is dialled.
	AllowPrivate bool
	HTTP         *http.Client // nil: a client with no overall timeout (streams are long)
	// Attempts bounds the tries of a call the endpoint refused for now (HTTP 429, 5xx) before
	// anything streamed (default 4); RetryBase and RetryMax shape the backoff between them
	// (default 1 s doubling, at most 30 s; the endpoint's retry-after wins, within RetryMax).
	// The person sees each wait as a HINT_BLOCK.
	Attempts            int
	RetryBase, RetryMax time.Duration
}

// Bounds of one streamed reply: a hostile or broken endpoint cannot grow the server's memory
// beyond them.
const (
	MaxToolCalls     = 64       // tool calls in one reply (indexes 0..63)
	MaxToolArgBytes  = 1 << 20  // arguments of one tool call
	MaxResponseBytes = 16 << 20 // the whole streamed reply
	maxLineBytes     = 4 << 20  // one SSE line
)

// Client talks to one model.
type Client struct {
	cfg Config
	hc  *http.Client
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, fault.Invalid("the model needs a base URL and a model name (Settings → Models)")
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 4
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = time.Second
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 30 * time.Second
	}
	hc := cfg.HTTP
	if hc == nil {
		hc = egress.ModelClient(cfg.AllowPrivate)
	}
	return &Client{cfg: cfg, hc: hc}, nil
}

// Name is the model's name.
func (c *Client) Name() string { return c.cfg.Model }

type message struct {
	Role       string     `json:"role"`
	Content    any        `json:"content"` // string or []part
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type part struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

type toolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type tool struct {
	Type     string         `json:"type"`
	Function agent.ToolSpec `json:"function"`
}

type request struct {
	Model         string    `json:"model"`
	Messages      []message `json:"messages"`
	Tools         []tool    `json:"tools,omitempty"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
}

type chunk struct {
	Choices []struct {
		Delta struct {
			Content          string     `json:"content"`
			ReasoningContent string     `json:"reasoning_content"`
			ToolCalls        []toolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Stream implements agent.Model.
func (c *Client) Stream(ctx context.Context, req agent.ModelRequest, onDelta func(agent.ModelDelta)) (agent.ModelReply, error) {
	body := request{Model: c.cfg.Model, Messages: convert(req), Stream: true, Temperature: req.Temperature}
	body.StreamOptions = &struct {
		IncludeUsage bool `json:"include_usage"`
	}{true}
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, tool{Type: "function", Function: t})
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return agent.ModelReply{}, fmt.Errorf("model request: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.cfg.BaseURL, "/")+"/chat/completions", bytes.NewReader(raw))
	if err != nil {
		return agent.ModelReply{}, fault.Invalid("the model's base URL %q is not valid: %v", c.cfg.BaseURL, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if c.cfg.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	start := time.Now()
	var resp *http.Response
	err = native.Backoff(ctx, c.cfg.Attempts, c.cfg.RetryBase, c.cfg.RetryMax, func(err error) native.Retry {
		var busy *busyError
		if errors.As(err, &busy) {
			return busy.retry
		}
		return native.Retry{}
	}, func(h string) { onDelta(agent.ModelDelta{Hint: h}) }, func() error {
		r := hr.Clone(ctx)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		var err error
		resp, err = c.post(ctx, r)
		return err
	})
	if err != nil {
		var busy *busyError
		if errors.As(err, &busy) {
			return agent.ModelReply{}, busy.err
		}
		return agent.ModelReply{}, err
	}
	defer resp.Body.Close()
	reply, err := readStream(io.LimitReader(resp.Body, MaxResponseBytes+1), onDelta)
	reply.Usage.Time = time.Since(start).Seconds()
	return reply, err
}

// busyError is an answer worth trying again (rate limited, overloaded, failing).
type busyError struct {
	err   error
	retry native.Retry
}

func (e *busyError) Error() string { return e.err.Error() }

// post sends one request; a non-200 answer is an error (a busyError when worth retrying).
func (c *Client) post(ctx context.Context, hr *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, fault.ErrForbidden) {
			return nil, fault.Forbidden("the model at %s: %v", c.cfg.BaseURL, err)
		}
		return nil, fault.Unavailable("cannot reach the model at %s: %v", c.cfg.BaseURL, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	class := fault.ErrUnavailable
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		class = fault.ErrForbidden
	case http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity:
		class = fault.ErrInvalid
	}
	err = fault.New(class, "the model %s answered HTTP %d: %s", c.cfg.Model, resp.StatusCode, strings.TrimSpace(string(msg)))
	r := native.Retry{After: native.RetryAfter(resp.Header.Get)}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		r.OK, r.Why = true, "rate limited (HTTP 429)"
	case resp.StatusCode >= 500:
		r.OK, r.Why = true, fmt.Sprintf("failing (HTTP %d)", resp.StatusCode)
	}
	if r.OK {
		return nil, &busyError{err: err, retry: r}
	}
	return nil, err
}

// Test makes one tiny request (a one-word prompt) and says what failed.
func (c *Client) Test(ctx context.Context) error {
	_, err := c.Stream(ctx, agent.ModelRequest{Messages: []agent.Msg{{Role: "user", Content: []agent.ContentBlock{{Type: "text", Text: "ping"}}}}},
		func(agent.ModelDelta) {})
	return err
}

func readStream(r io.Reader, onDelta func(agent.ModelDelta)) (agent.ModelReply, error) {
	var reply agent.ModelReply
	var text, thinking strings.Builder
	type pending struct {
		id, name string
		args     strings.Builder
	}
	var calls []*pending
	cr := &countingReader{r: r}
	sc := bufio.NewScanner(cr)
	sc.Buffer(make([]byte, 64*1024), maxLineBytes)
	for sc.Scan() {
		if cr.n > MaxResponseBytes {
			return reply, fault.Unavailable("the model's reply is larger than %d MiB; stopped reading it", MaxResponseBytes>>20)
		}
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			break
		}
		var ch chunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return reply, fault.Unavailable("the model sent a malformed stream chunk: %v", err)
		}
		if ch.Error != nil {
			return reply, fault.Unavailable("the model reported an error: %s", ch.Error.Message)
		}
		if u := ch.Usage; u != nil {
			reply.Usage.InputTokens, reply.Usage.OutputTokens, reply.Usage.TotalTokens = u.PromptTokens, u.CompletionTokens, u.TotalTokens
			if u.PromptTokensDetails != nil {
				reply.Usage.CachedTokens = u.PromptTokensDetails.CachedTokens
			}
		}
		for _, choice := range ch.Choices {
			d := choice.Delta
			if d.ReasoningContent != "" {
				thinking.WriteString(d.ReasoningContent)
				onDelta(agent.ModelDelta{Thinking: d.ReasoningContent})
			}
			if d.Content != "" {
				text.WriteString(d.Content)
				onDelta(agent.ModelDelta{Text: d.Content})
			}
			for _, tc := range d.ToolCalls {
				i := len(calls)
				if tc.Index != nil {
					i = *tc.Index
				}
				if i < 0 || i >= MaxToolCalls {
					return reply, fault.Unavailable("the model sent tool call index %d; at most %d tool calls (indexes 0–%d) are accepted in one reply", i, MaxToolCalls, MaxToolCalls-1)
				}
				for len(calls) <= i {
					calls = append(calls, &pending{})
				}
				p := calls[i]
				if tc.ID != "" {
					p.id = tc.ID
				}
				if tc.Function.Name != "" {
					p.name = tc.Function.Name
				}
				if p.args.Len()+len(tc.Function.Arguments) > MaxToolArgBytes {
					return reply, fault.Unavailable("the model sent more than %d KiB of arguments for one tool call", MaxToolArgBytes>>10)
				}
				p.args.WriteString(tc.Function.Arguments)
				onDelta(agent.ModelDelta{ToolIndex: i, ToolID: tc.ID, ToolName: tc.Function.Name, ToolArgs: tc.Function.Arguments})
			}
			if choice.FinishReason != "" {
				reply.FinishReason = choice.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return reply, fault.Unavailable("the model sent a stream line longer than %d MiB", maxLineBytes>>20)
		}
		return reply, fault.Unavailable("the model's stream broke off: %v", err)
	}
	if cr.n > MaxResponseBytes {
		return reply, fault.Unavailable("the model's reply is larger than %d MiB; stopped reading it", MaxResponseBytes>>20)
	}
	reply.Text, reply.Thinking = text.String(), thinking.String()
	for i, p := range calls {
		in := map[string]any{}
		if s := strings.TrimSpace(p.args.String()); s != "" {
			if err := json.Unmarshal([]byte(s), &in); err != nil {
				in = map[string]any{"_raw": s, "_error": "arguments are not a JSON object"}
			}
		}
		id := p.id
		if id == "" {
			id = fmt.Sprintf("call_%d", i)
		}
		reply.ToolCalls = append(reply.ToolCalls, agent.ToolCall{ID: id, Name: p.name, Input: in})
	}
	return reply, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// convert maps the runtime's conversation onto chat-completions messages.
func convert(req agent.ModelRequest) []message {
	var out []message
	if req.System != "" {
		out = append(out, message{Role: "system", Content: req.System})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case "assistant":
			msg := message{Role: "assistant"}
			var text strings.Builder
			for _, b := range m.Content {
				switch b.Type {
				case "text":
					text.WriteString(b.Text)
				case "tool_use":
					args, _ := json.Marshal(b.Input)
					var tc toolCall
					tc.ID, tc.Type = b.ToolCallID, "function"
					tc.Function.Name, tc.Function.Arguments = b.Name, string(args)
					msg.ToolCalls = append(msg.ToolCalls, tc)
				}
			}
			msg.Content = text.String()
			out = append(out, msg)
		default:
			var parts []part
			var images []part
			for _, b := range m.Content {
				switch b.Type {
				case "text":
					parts = append(parts, part{Type: "text", Text: b.Text})
				case "image":
					parts = append(parts, imagePart(b))
				case "tool_result":
					var text strings.Builder
					for _, c := range b.Content {
						switch c.Type {
						case "text":
							text.WriteString(c.Text)
						case "image":
							images = append(images, imagePart(c))
						}
					}
					if text.Len() == 0 {
						text.WriteString("(" + b.State + ")")
					}
					out = append(out, message{Role: "tool", ToolCallID: b.ToolCallID, Content: text.String()})
				}
			}
			if len(images) > 0 {
				parts = append([]part{{Type: "text", Text: "Screenshot(s) returned by the tool call(s) above:"}}, append(images, parts...)...)
			}
			if len(parts) > 0 {
				out = append(out, message{Role: "user", Content: parts})
			}
		}
	}
	return out
}

func imagePart(b agent.ContentBlock) part {
	return part{Type: "image_url", ImageURL: &imageURL{URL: "data:" + b.MediaType + ";base64," + b.Data}}
}

var _ agent.Model = (*Client)(nil)

// maxModels bounds a provider's model list (a settings picker, not a catalogue).
const maxModels = 500

// Models lists the endpoint's models (GET {base}/models, the OpenAI list shape most
// compatible servers answer: Ollama, vLLM, LM Studio, OpenRouter), sorted.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.cfg.BaseURL, "/")+"/models", nil)
	if err != nil {
		return nil, fault.Invalid("the model's base URL %q is not valid: %v", c.cfg.BaseURL, err)
	}
	if c.cfg.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, fault.ErrForbidden) {
			return nil, fault.Forbidden("the model endpoint %s: %v", c.cfg.BaseURL, err)
		}
		return nil, fault.Unavailable("cannot reach the model endpoint %s: %v", c.cfg.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		class := fault.ErrUnavailable
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			class = fault.ErrForbidden
		case http.StatusNotFound:
			class = fault.ErrNotFound
		}
		return nil, fault.New(class, "the endpoint %s answered HTTP %d to GET /models: %s", c.cfg.BaseURL, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&list); err != nil {
		return nil, fault.Unavailable("the endpoint %s answered GET /models with something that is not a model list: %v", c.cfg.BaseURL, err)
	}
	out := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" && len(out) < maxModels {
			out = append(out, m.ID)
		}
	}
	slices.Sort(out)
	return out, nil
}
