package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/chromedp/cdproto"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"cubicle/backend/fault"
)

// Dial opens a new byte stream to the browser's DevTools endpoint (a tunnel through the
// desktop driver to 127.0.0.1:9222 inside the browser's container). It is called once for
// the version lookup and once for the websocket.
type Dial func(ctx context.Context) (net.Conn, error)

// devtoolsHost is the Host the requests name: Chromium answers only to localhost or an IP.
const devtoolsHost = "127.0.0.1:9222"

// allocator connects chromedp to the Chromium behind dial. It starts no process (it is an
// attacher: chromedp treats each context as a tab of the running browser).
type allocator struct {
	dial Dial
	wg   sync.WaitGroup
}

// Allocate implements chromedp.Allocator.
func (a *allocator) Allocate(ctx context.Context, opts ...chromedp.BrowserOption) (*chromedp.Browser, error) {
	wsURL, err := a.browserURL(ctx)
	if err != nil {
		return nil, err
	}
	// The websocket lives as long as the allocator's context, not the call's.
	wctx, cancel := context.WithCancel(context.Background())
	a.wg.Go(func() {
		<-ctx.Done()
		chromedp.Cancel(ctx)
		cancel()
	})
	d := websocket.Dialer{
		NetDialContext:   func(ctx context.Context, _, _ string) (net.Conn, error) { return a.dial(ctx) },
		HandshakeTimeout: 15 * time.Second,
		ReadBufferSize:   64 << 10,
		WriteBufferSize:  64 << 10,
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	ws, _, err := d.DialContext(dctx, wsURL, nil)
	if err != nil {
		cancel()
		return nil, fault.Unavailable("browser: connect to DevTools: %v", err)
	}
	ws.SetReadLimit(256 << 20)
	return chromedp.NewBrowserTransport(wctx, &wsTransport{ws: ws}, opts...)
}

// Wait implements chromedp.Allocator.
func (a *allocator) Wait() { a.wg.Wait() }

// Attaches implements chromedp.Attacher: the browser runs already.
func (a *allocator) Attaches() bool { return true }

// browserURL asks the browser for its websocket address (GET /json/version), retrying while
// Chromium is still starting in its container.
func (a *allocator) browserURL(ctx context.Context) (string, error) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return a.dial(ctx) },
		DisableKeepAlives: true,
	}, Timeout: 10 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+devtoolsHost+"/json/version", nil)
		resp, err := hc.Do(req)
		if err == nil {
			var v struct {
				URL string `json:"webSocketDebuggerUrl"`
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if err = json.Unmarshal(body, &v); err == nil && v.URL != "" {
				return v.URL, nil
			}
			if err == nil {
				err = fmt.Errorf("no websocket address in %q", body)
			}
		}
		last = err
		if ctx.Err() != nil || time.Now().After(deadline) {
			return "", fault.Unavailable("browser: the agent's Chromium does not answer on its DevTools port: %v", last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// wsTransport implements chromedp.Transport over a gorilla websocket.
type wsTransport struct {
	ws  *websocket.Conn
	wmu sync.Mutex
}

func (t *wsTransport) Read(_ context.Context, msg *cdproto.Message) error {
	typ, data, err := t.ws.ReadMessage()
	if err != nil {
		return err
	}
	if typ != websocket.TextMessage {
		return fmt.Errorf("browser: unexpected websocket message type %d", typ)
	}
	return jsonv2.Unmarshal(data, msg, chromedp.DefaultUnmarshalOptions)
}

func (t *wsTransport) Write(_ context.Context, msg *cdproto.Message) error {
	data, err := jsonv2.Marshal(msg, chromedp.DefaultMarshalOptions)
	if err != nil {
		return err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	return t.ws.WriteMessage(websocket.TextMessage, data)
}

func (t *wsTransport) Close() error { return t.ws.Close() }
