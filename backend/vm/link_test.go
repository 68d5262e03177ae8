package vm

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/link"
)

// linkModes runs f once per guest link the manager can be configured with.
func linkModes(t *testing.T, f func(t *testing.T, mode link.Mode)) {
	for _, mode := range []link.Mode{link.SocketMode, link.ExecMode} {
		t.Run(string(mode), func(t *testing.T) { f(t, mode) })
	}
}

func withLink(mode link.Mode) func(*Config) {
	return func(c *Config) { c.Link.Choice = link.Choose(mode, link.Engine{GOOS: "linux", Socket: "unix:///x"}) }
}

func TestOneLinkPerDesktop(t *testing.T) {
	linkModes(t, func(t *testing.T, mode link.Mode) {
		f := newFixture(t, withLink(mode))
		f.prepare("standard")
		v := f.act("acc1", "g1", ActionCreate)
		id := v.Desktop.ID
		c, _ := f.eng.ByName(v.Desktop.Container)
		if mode == link.ExecMode && len(c.Spec.Mounts) != 0 {
			t.Errorf("exec link: the desktop has host mounts %+v, want none", c.Spec.Mounts)
		}
		if mode == link.SocketMode && len(c.Spec.Mounts) != 1 {
			t.Errorf("socket link: mounts %+v, want the run directory", c.Spec.Mounts)
		}
		if v.Desktop.GuestLink != string(mode) || v.Desktop.Health != HealthOK {
			t.Fatalf("view after create: link %q health %q", v.Desktop.GuestLink, v.Desktop.Health)
		}
		// Many users of the desktop share its one link (no connection per caller).
		first, err := f.m.Link(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for range 50 {
			c, err := f.m.Link(context.Background(), id)
			if err != nil || c != first {
				t.Fatalf("Link: %v (same: %v)", err, c == first)
			}
			f.act("acc1", "g1", ActionStart)
		}
		if n := f.eng.DriverLinks(v.Desktop.Container); n != 1 {
			t.Fatalf("%d driver connections open, want 1", n)
		}
		if res, err := first.Exec(context.Background(), execReq("echo hi")); err != nil || string(res.Stdout) != "echo hi" {
			t.Fatalf("exec over the link: %+v %v", res, err)
		}
		st, err := f.m.Status(context.Background())
		if err != nil || st.GuestLink.Primary != string(mode) {
			t.Fatalf("status guest link %+v %v", st.GuestLink, err)
		}
		// Stop closes the link: its users get a clear error, nothing is left open.
		f.act("acc1", "g1", ActionStop)
		if _, err := first.Health(context.Background()); !errors.Is(err, fault.ErrUnavailable) {
			t.Fatalf("a call after stop: %v", err)
		}
		if n := f.eng.DriverLinks(v.Desktop.Container); n != 0 {
			t.Fatalf("%d driver connections open after stop", n)
		}
		if _, err := f.m.Link(context.Background(), id); !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "not running") {
			t.Fatalf("Link to a stopped desktop: %v", err)
		}
		if v := f.act("acc1", "g1", ActionStart); v.Desktop.Health != HealthOK || f.eng.DriverLinks(v.Desktop.Container) != 1 {
			t.Fatalf("after start: health %q, %d links", v.Desktop.Health, f.eng.DriverLinks(v.Desktop.Container))
		}
	})
}

func TestDeadDriverMarksUnhealthyAndStartRepairs(t *testing.T) {
	linkModes(t, func(t *testing.T, mode link.Mode) {
		f := newFixture(t, withLink(mode))
		f.prepare("standard")
		v := f.act("acc1", "g1", ActionCreate)
		id, name := v.Desktop.ID, v.Desktop.Container
		c, err := f.m.Link(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		f.eng.KillDriver(name)
		// The in-flight user finds out at once; the desktop shows unhealthy with a reason.
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the link did not notice the dead driver")
		}
		waitFor(t, "unhealthy", func() bool { return !f.m.LinkState(id).Healthy })
		av, err := f.m.Agent(context.Background(), "acc1", "g1")
		if err != nil {
			t.Fatal(err)
		}
		if av.Desktop.State != StateRunning || av.Desktop.Health != HealthUnhealthy ||
			!strings.Contains(av.Desktop.LastError, "cannot be reached") || !strings.Contains(av.Desktop.LastError, "start the desktop") {
			t.Fatalf("view of a desktop with a dead driver: %+v", av.Desktop)
		}
		if _, err := f.m.Link(context.Background(), id); !errors.Is(err, fault.ErrUnavailable) {
			t.Fatalf("Link to a dead driver: %v", err)
		}
		// Start repairs it: the same container restarted (never a new one), a new link.
		calls := len(f.eng.Calls())
		v = f.act("acc1", "g1", ActionStart)
		after := f.eng.Calls()[calls:]
		if v.Desktop.Health != HealthOK || v.Desktop.LastError != "" || v.Desktop.State != StateRunning {
			t.Fatalf("after repair: %+v", v.Desktop)
		}
		if !slices.Contains(after, "stop") || !slices.Contains(after, "start") || slices.Contains(after, "create") || slices.Contains(after, "remove") {
			t.Fatalf("repair made the engine calls %v, want a stop and a start of the same container", after)
		}
		c2, err := f.m.Link(context.Background(), id)
		if err != nil || c2 == c {
			t.Fatalf("link after repair: %v", err)
		}
		if _, err := c2.Health(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAutoLinkFallsBackToExec(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Link.Choice = link.Choose(link.Auto, link.Engine{GOOS: "linux", Socket: "unix:///run/podman/podman.sock"})
		c.Link.Socket = deadSocket{}
		c.Link.FallbackAfter = 50 * time.Millisecond
	})
	f.prepare("standard")
	v := f.act("acc1", "g1", ActionCreate)
	if v.Desktop.GuestLink != link.NameExec || v.Desktop.Health != HealthOK {
		t.Fatalf("desktop with a socket that never answers: %+v", v.Desktop)
	}
	st, _ := f.m.Status(context.Background())
	if st.GuestLink.Primary != link.NameExec || !strings.Contains(st.GuestLink.Reason, "socket link failed") {
		t.Fatalf("status guest link %+v", st.GuestLink)
	}
}

// deadSocket is a socket transport whose socket never answers.
type deadSocket struct{}

func (deadSocket) Name() string { return link.NameSocket }
func (deadSocket) Open(ctx context.Context, t link.Target) (net.Conn, error) {
	return nil, fault.Unavailable("nothing answers at %s", t.Socket)
}

func TestProbeOverEachLink(t *testing.T) {
	linkModes(t, func(t *testing.T, mode link.Mode) {
		f := newFixture(t, withLink(mode))
		img := f.prepare("standard")
		if img.DriverVersion != "fake-1" {
			t.Fatalf("prepared %+v", img)
		}
		if n := f.eng.Count(); n != 0 {
			t.Fatalf("%d probe containers left", n)
		}
	})
}

func execReq(shell string) guest.ExecRequest { return guest.ExecRequest{Shell: shell} }
