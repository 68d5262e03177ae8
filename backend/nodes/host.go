package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"cubicle/backend/fault"
	"cubicle/runner/wire"
)

// HostTools reports whether the runner's host runs host tools now: its link is up and it
// advertised wire.CapHostTools. The error names the runner and what it must support.
func (r *Remote) HostTools() error {
	c, err := r.live()
	if err != nil {
		return err
	}
	if !hasCap(c.hello, wire.CapHostTools) {
		return fault.Conflict("runner %s (%s, version %s) does not run host tools (capability %s): update it, and start it without --no-host-tools",
			c.name, r.id, c.hello.Version, wire.CapHostTools)
	}
	return nil
}

// Label names the runner for people: `runner "name" (id)`.
func (r *Remote) Label() string {
	if c := r.h.conn(r.id); c != nil {
		return fmt.Sprintf("runner %q (%s)", c.name, r.id)
	}
	if rec, err := r.h.cfg.Store.Runner(r.id); err == nil {
		return fmt.Sprintf("runner %q (%s)", rec.Name, r.id)
	}
	return "runner " + r.id
}

// HostShell runs a command on the runner's host. Cancelling ctx closes the stream, and the
// runner kills the command's process group.
func (r *Remote) HostShell(ctx context.Context, a wire.HostShellArgs) (wire.HostShellResult, error) {
	if err := r.HostTools(); err != nil {
		return wire.HostShellResult{}, err
	}
	var res wire.HostShellResult
	err := r.call(ctx, wire.OpHostShell, a, &res)
	return res, err
}

// HostHome is the runner user's home directory on the runner's host. It is asked once per
// link connection (a runner that reconnects may run as another user) and kept; a failed
// answer is not kept, so the next call asks again.
func (r *Remote) HostHome(ctx context.Context) (string, error) {
	if err := r.HostTools(); err != nil {
		return "", err
	}
	c, err := r.live()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	home := c.home
	c.mu.Unlock()
	if home != "" {
		return home, nil
	}
	if err := r.call(ctx, wire.OpHostHome, nil, &home); err != nil {
		return "", err
	}
	if home == "" || strings.ContainsRune(home, 0) {
		return "", fault.Unavailable("runner %s (%s) answered no usable home directory (%q)", c.name, r.id, home)
	}
	c.mu.Lock()
	c.home = home
	c.mu.Unlock()
	return home, nil
}

// HostReadFile reads at most max bytes of path on the runner's host.
func (r *Remote) HostReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	if err := r.HostTools(); err != nil {
		return nil, err
	}
	st, c, err := r.open(ctx, wire.OpHostReadFile, wire.HostFileArgs{Path: path, Max: max})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	var resp wire.Response
	if err := wire.ReadFrame(st, &resp); err != nil {
		return nil, r.linkErr(ctx, c, wire.OpHostReadFile, err)
	}
	if resp.Error != nil {
		return nil, resp.Error.Err()
	}
	var f wire.HostFile // then f.Size raw bytes
	if err := json.Unmarshal(resp.Result, &f); err != nil {
		return nil, err
	}
	if f.Size < 0 || f.Size > max {
		return nil, fault.Invalid("%s is %d bytes, more than the %d allowed", path, f.Size, max)
	}
	data := make([]byte, f.Size)
	if _, err := io.ReadFull(st, data); err != nil {
		return nil, r.linkErr(ctx, c, wire.OpHostReadFile, err)
	}
	return data, nil
}

// HostWriteFile replaces path on the runner's host with data.
func (r *Remote) HostWriteFile(ctx context.Context, path string, data []byte) error {
	if err := r.HostTools(); err != nil {
		return err
	}
	st, c, err := r.open(ctx, wire.OpHostWriteFile, wire.HostFileArgs{Path: path, Size: int64(len(data))})
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	st.SetWriteDeadline(time.Now().Add(5 * time.Minute))
	if _, err := st.Write(data); err != nil {
		return r.linkErr(ctx, c, wire.OpHostWriteFile, err)
	}
	st.SetWriteDeadline(time.Time{})
	var resp wire.Response
	if err := wire.ReadFrame(st, &resp); err != nil {
		return r.linkErr(ctx, c, wire.OpHostWriteFile, err)
	}
	return resp.Error.Err()
}

func (r *Remote) linkErr(ctx context.Context, c *conn, op string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fault.Unavailable("runner %s (%s) did not answer %s: %v", c.name, r.id, op, err)
}
