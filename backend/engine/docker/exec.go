package docker

import (
	"context"
	"errors"
	"fmt"

	"github.com/docker/docker/api/types/container"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// ExecAttach starts spec.Command in the running container id with its stdin and stdout
// attached, without a TTY (so the output is multiplexed, and engine.ExecStream
// demultiplexes it), and returns the stream; ctx bounds the start only, the stream lives
// until it is closed or the process ends. A container that is not running is
// fault.ErrConflict, a missing one fault.ErrNotFound.
func (c *Client) ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error) {
	op := fmt.Sprintf("exec in container %q", id)
	opts := container.ExecOptions{AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: spec.Command, User: spec.User, WorkingDir: spec.WorkDir}
	for k, v := range spec.Env {
		opts.Env = append(opts.Env, k+"="+v)
	}
	created, err := c.api.ContainerExecCreate(ctx, id, opts)
	if err != nil {
		// Docker answers a stopped container with 409, Podman's compatible service with 500.
		if st, ierr := c.InspectContainer(ctx, id); ierr == nil && !st.Running {
			return nil, fmt.Errorf("%s: %w", op, fault.Conflict("container %q is %s, not running: start it first", id, st.Status))
		} else if errors.Is(ierr, fault.ErrNotFound) {
			return nil, ierr
		}
		return nil, fail(op, err)
	}
	hj, err := c.api.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, fail(op, err)
	}
	return engine.NewExecStream(hj.Conn, hj.Reader), nil
}
