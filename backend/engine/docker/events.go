package docker

import (
	"context"
	"net/url"

	"cubicle/backend/engine"
)

// Events subscribes to the daemon's container events, keeping those whose container carries
// every label in labels (nil: all). It returns once the daemon accepted the subscription, so
// nothing that happens afterwards is missed. The stream ends when ctx ends, on Close, or when
// the daemon goes away (Next then fails with fault.ErrUnavailable).
func (c *Client) Events(ctx context.Context, labels map[string]string) (*engine.EventStream, error) {
	body, err := c.rawStream(ctx, "GET", "/events", url.Values{"filters": {engine.EventFilters(labels)}}, nil)
	if err != nil {
		return nil, fail("subscribe to docker events", err)
	}
	return engine.NewEventStream(body, labels), nil
}
