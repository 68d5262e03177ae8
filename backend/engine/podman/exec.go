package podman

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// ExecAttach starts spec.Command in the running container id with its stdin and stdout
// attached, without a TTY, and returns the stream; ctx bounds the start only, the stream
// lives until it is closed or the process ends. A container that is not running is
// fault.ErrConflict, a missing one fault.ErrNotFound.
//
// The start request is sent on a connection of its own, hijacked here: the bindings'
// ExecStartAndAttach swaps the transport of the shared HTTP client (unsafe next to other
// calls) and only returns when the session ends.
func (c *Client) ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error) {
	op := fmt.Sprintf("exec in container %q", id)
	cfg := new(handlers.ExecCreateConfig)
	cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = true, true, true
	cfg.Cmd, cfg.User, cfg.WorkingDir = spec.Command, spec.User, spec.WorkDir
	for k, v := range spec.Env {
		cfg.Env = append(cfg.Env, k+"="+v)
	}
	sid, err := containers.ExecCreate(c.ctx(ctx), id, cfg)
	if err != nil {
		// The service answers a container that is not running with a bare 500.
		if st, ierr := c.InspectContainer(ctx, id); ierr == nil && !st.Running {
			return nil, fmt.Errorf("%s: %w", op, fault.Conflict("container %q is %s, not running: start it first", id, st.Status))
		} else if errors.Is(ierr, fault.ErrNotFound) {
			return nil, ierr
		}
		return nil, fail(op, err)
	}
	bc, err := bindings.GetClient(c.conn)
	if err != nil {
		return nil, engine.Wrap(op, 0, err)
	}
	tr, ok := bc.Client.Transport.(*http.Transport)
	if !ok || tr.DialContext == nil {
		return nil, engine.Wrap(op, 0, fmt.Errorf("the podman connection has no dialer (transport %T)", bc.Client.Transport))
	}
	conn, err := tr.DialContext(ctx, "unix", "d")
	if err != nil {
		return nil, engine.Wrap(op, 0, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	base := "http://d"
	if bc.URI.Scheme == "tcp" {
		base = "http://" + bc.URI.Host + bc.URI.Path
	}
	v := c.version
	url := fmt.Sprintf("%s/v%d.%d.%d/libpod/exec/%s/start", base, v.Major, v.Minor, v.Patch, sid)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(`{"Detach":false,"Tty":false}`)))
	if err != nil {
		conn.Close()
		return nil, engine.Wrap(op, 0, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, engine.Wrap(op, 0, err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, engine.Wrap(op, 0, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		conn.Close()
		return nil, engine.Wrap(op, resp.StatusCode, fmt.Errorf("start exec session: %s: %s", resp.Status, bytes.TrimSpace(body)))
	}
	conn.SetDeadline(time.Time{})
	return engine.NewExecStream(conn, br), nil
}
