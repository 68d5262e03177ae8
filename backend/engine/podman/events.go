package podman

import (
	"context"
	"net/http"
	"net/url"

	"github.com/containers/podman/v5/pkg/bindings"

	"cubicle/backend/engine"
)

// Events subscribes to the service's container events, keeping those whose container carries
// every label in labels (nil: all). It returns once the service accepted the subscription, so
// nothing that happens afterwards is missed. The stream ends when ctx ends, on Close, or when
// the service goes away (Next then fails with fault.ErrUnavailable).
func (c *Client) Events(ctx context.Context, labels map[string]string) (*engine.EventStream, error) {
	op := "subscribe to podman events"
	conn, err := bindings.GetClient(c.conn)
	if err != nil {
		return nil, engine.Wrap(op, 0, err)
	}
	q := url.Values{"stream": {"true"}, "filters": {engine.EventFilters(labels)}}
	resp, err := conn.DoRequest(ctx, nil, http.MethodGet, "/events", q, nil)
	if err != nil {
		return nil, fail(op, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, fail(op, resp.Process(nil))
	}
	return engine.NewEventStream(resp.Body, labels), nil
}
