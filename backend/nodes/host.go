package nodes

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"cubicle/backend/fault"
	"cubicle/runner/wire"
)

// HostTools reports whether the runner's host runs host tools now: its link is up and it
// advertised wire.CapHostTools. The error names the runner and what it must support (the
// host ops' refusal, wire.HostShell).
func (r *Remote) HostTools() error {
	c, err := r.live()
	if err != nil {
		return err
	}
	return wire.HostShell.Refuse(c.hello.Capabilities, c.name, r.id, c.hello.Version, r.h.cfg.Version)
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
	return call(ctx, r, wire.HostShell, a)
}

// HostHome is the runner user's home directory on the runner's host. It is asked once per
// link connection (a runner that reconnects may run as another user) and kept; a failed
// answer is not kept, so the next call asks again.
func (r *Remote) HostHome(ctx context.Context) (string, error) {
	info, c, err := r.hostInfo(ctx)
	if err != nil {
		return "", err
	}
	if info.Home == "" {
		if info.HomeProblem != "" {
			return "", fault.Unavailable("%s", info.HomeProblem)
		}
		return "", fault.Unavailable("runner %s (%s) answered no usable home directory", c.name, r.id)
	}
	return info.Home, nil
}

// HostProtected are the absolute paths the runner protects of its own on its host (its data
// directory), as it said in wire.OpHostInfo; none for a runner without wire.CapHostGuard. The
// server's guard protects them on that host for every host tool (host_shell included).
func (r *Remote) HostProtected(ctx context.Context) ([]string, error) {
	info, _, err := r.hostInfo(ctx)
	return info.Protected, err
}

// hostInfo asks the runner its home and its own protected paths (wire.OpHostInfo; a runner
// without wire.CapHostGuard is asked wire.OpHostHome), once per link connection: the answer
// is kept when it names a home.
func (r *Remote) hostInfo(ctx context.Context) (wire.HostInfo, *conn, error) {
	if err := r.HostTools(); err != nil {
		return wire.HostInfo{}, nil, err
	}
	c, err := r.live()
	if err != nil {
		return wire.HostInfo{}, nil, err
	}
	c.mu.Lock()
	kept := c.host
	c.mu.Unlock()
	if kept != nil {
		return *kept, c, nil
	}
	var info wire.HostInfo
	if hasCap(c.hello, wire.CapHostGuard) {
		info, err = call(ctx, r, wire.HostInfoOp, wire.None{})
	} else {
		info.Home, err = call(ctx, r, wire.HostHome, wire.None{})
	}
	if err != nil {
		return wire.HostInfo{}, c, err
	}
	for _, p := range append([]string{info.Home}, info.Protected...) {
		if strings.ContainsRune(p, 0) {
			return wire.HostInfo{}, c, fault.Unavailable("runner %s (%s) answered an unusable path (%q) for its home or its protected paths", c.name, r.id, p)
		}
	}
	if info.Home != "" {
		c.mu.Lock()
		c.host = &info
		c.mu.Unlock()
	}
	return info, c, nil
}

// HostReadFile reads at most max bytes of path on the runner's host. protected are the
// absolute paths this server's file guard protects on that host: a runner with
// wire.CapHostGuard refuses path when it resolves into one of them on its own disk (or into its
// data directory); an older runner is not sent them.
func (r *Remote) HostReadFile(ctx context.Context, path string, max int64, protected []string, sb *wire.HostSandbox) ([]byte, error) {
	req, err := wire.HostReadFile.Request(wire.HostFileArgs{Path: path, Max: max, Protected: r.guarded(protected), Sandbox: sb})
	if err != nil {
		return nil, err
	}
	st, c, err := r.open(ctx, wire.HostReadFile.Spec, req)
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
	f, err := wire.HostReadFile.Result(resp) // then f.Size raw bytes
	if err != nil {
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

// HostWriteFile replaces path on the runner's host with data; protected are as for
// HostReadFile.
func (r *Remote) HostWriteFile(ctx context.Context, path string, data []byte, protected []string, sb *wire.HostSandbox) error {
	req, err := wire.HostWriteFile.Request(wire.HostFileArgs{Path: path, Size: int64(len(data)), Protected: r.guarded(protected), Sandbox: sb})
	if err != nil {
		return err
	}
	st, c, err := r.open(ctx, wire.HostWriteFile.Spec, req)
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
	_, err = wire.HostWriteFile.Result(resp)
	return err
}

// Supports reports whether the runner's link is up and it advertised capability c.
func (r *Remote) Supports(c string) bool {
	conn, err := r.live()
	return err == nil && hasCap(conn.hello, c)
}

// guarded is protected for a runner that checks host paths itself (wire.CapHostGuard), nil
// for an older one.
func (r *Remote) guarded(protected []string) []string {
	if c, err := r.live(); err != nil || !hasCap(c.hello, wire.CapHostGuard) {
		return nil
	}
	return protected
}

func (r *Remote) linkErr(ctx context.Context, c *conn, op string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fault.Unavailable("runner %s (%s) did not answer %s: %v", c.name, r.id, op, err)
}
