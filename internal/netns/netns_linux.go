//go:build linux

package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"cubicle/backend/fault"
)

// Available says why hosts cannot be made here (nil: they can).
func Available() error {
	if os.Geteuid() != 0 {
		return fault.Unavailable("network namespaces need root (ip netns add)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fault.Unavailable("network namespaces need iproute2 (the ip command): %v", err)
	}
	return nil
}

// New makes a namespace named with prefix and a random tag, linked to this one. Close
// removes it; on an error New removes what it made.
func New(prefix string) (*Host, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	b := make([]byte, 3)
	rand.Read(b)
	tag := hex.EncodeToString(b)
	// A free /30: the third octet from the tag, skipping ones in use on this machine. Other
	// processes (test packages run in parallel, a bench) make hosts at the same time: the
	// machine-wide lock keeps the choice and the address's use one step, so two hosts never
	// take the same /30.
	unlock, err := lockChoice()
	if err != nil {
		return nil, err
	}
	defer unlock()
	used, _ := exec.Command("ip", "-o", "addr").Output()
	third := -1
	for i := 0; i < 256; i++ {
		n := (int(b[0]) + i) % 256
		if !strings.Contains(string(used), fmt.Sprintf("10.231.%d.", n)) {
			third = n
			break
		}
	}
	if third < 0 {
		return nil, fault.Unavailable("no free /30 left in %s", Subnet)
	}
	short := prefix
	if len(short) > 4 { // interface names have at most 15 bytes
		short = short[:4]
	}
	h := &Host{NS: prefix + "-" + tag, Outer: short + tag + "o", ServerAddr: fmt.Sprintf("10.231.%d.1", third),
		Addr: fmt.Sprintf("10.231.%d.2", third)}
	inner := short + tag + "i"
	for _, args := range [][]string{
		{"netns", "add", h.NS},
		{"link", "add", h.Outer, "type", "veth", "peer", "name", inner},
		{"link", "set", inner, "netns", h.NS},
		{"addr", "add", h.ServerAddr + "/30", "dev", h.Outer},
		{"link", "set", h.Outer, "up"},
		{"-n", h.NS, "addr", "add", h.Addr + "/30", "dev", inner},
		{"-n", h.NS, "link", "set", inner, "up"},
		{"-n", h.NS, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// lockChoice takes the machine-wide lock on choosing a /30 (an flock, which the kernel
// releases if the process dies) and returns its release.
func lockChoice() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "cubicle-netns.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fault.Unavailable("network namespaces: the address lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fault.Unavailable("network namespaces: the address lock: %v", err)
	}
	return func() { f.Close() }, nil
}

// Close removes the namespace and its link.
func (h *Host) Close() error {
	err := ip("netns", "del", h.NS)
	// The link goes with the namespace, unless New failed half-way.
	if lerr := ip("link", "del", h.Outer); lerr == nil {
		err = nil
	}
	return err
}

// SetLink brings the host's link up or down (this side's end).
func (h *Host) SetLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip("link", "set", h.Outer, state)
}

// Route adds a route inside the host's namespace: dst (an address or prefix) via gw.
func (h *Host) Route(dst, gw string) error {
	return ip("-n", h.NS, "route", "add", dst, "via", gw)
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fault.Unavailable("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return fault.Unavailable("ip %s: %v", strings.Join(args, " "), err)
	}
	return nil
}
