package nodes

import (
	"context"

	"cubicle/runner/wire"
)

// Sent is how many requests of op the server sent on runner node's current link (-1: no link).
func Sent(h *Hub, node, op string) int {
	c := h.conn(node)
	if c == nil {
		return -1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent[op]
}

// Open opens a stream for op (arguments null) as every Remote method does, and closes it.
func Open(ctx context.Context, r *Remote, op wire.Spec) error {
	st, _, err := r.open(ctx, op, wire.Request{Op: op.Name})
	if err == nil {
		st.Close()
	}
	return err
}
