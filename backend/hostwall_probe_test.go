package backend

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"cubicle/backend/guest"
	"cubicle/backend/vm"
)

// wantHostWalled checks from inside running desktop v that a service of this machine,
// listening on every address, is refused on the desktop's default gateway — when Cubicle runs
// as root (else the wall cannot be made and only what the view says is logged).
func wantHostWalled(t *testing.T, b *Backend, v vm.InstanceView) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Logf("not root: host wall %q not checked", v.HostWall)
		return
	}
	if v.HostWall != "on" {
		t.Fatalf("host wall: %q", v.HostWall)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c, err := b.VMs.Link(context.Background(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	probe := `import socket, sys
gw = [l.split()[2] for l in open("/proc/net/route") if l.split()[1] == "00000000"][0]
h = socket.inet_ntoa(bytes.fromhex(gw)[::-1])
try:
    socket.create_connection((h, int(sys.argv[1])), timeout=4); print(h, "open")
except Exception as e:
    print(h, "closed", type(e).__name__)
`
	res, err := c.Exec(context.Background(), guest.ExecRequest{Command: []string{"python3", "-c", probe,
		strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}, Timeout: time.Minute})
	if err != nil || !strings.Contains(string(res.Stdout), "closed") {
		t.Fatalf("the desktop reaches this machine's services: %v %q %q", err, res.Stdout, res.Stderr)
	}
	t.Logf("a service of this machine, from inside the desktop: %s", strings.TrimSpace(string(res.Stdout)))
}
