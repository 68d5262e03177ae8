package engine

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ReadHostLimits returns the hard limits that bind containers started through the engine
// service at socketPath: the lower of this process's own hard limits and, when the service is
// a local process whose pid the socket reveals (SO_PEERCRED) and whose /proc entry is
// readable, the service's hard limits (its OCI runtime inherits them). Errors only lower the
// precision: the own limits are always known. Only Linux shares its kernel with the
// containers; elsewhere the engine runs in a VM and the limits are unknown (zero).
func ReadHostLimits(socketPath string) HostLimits {
	var h HostLimits
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &r) == nil {
		h.NoFile = r.Max
	}
	if unix.Getrlimit(unix.RLIMIT_NPROC, &r) == nil {
		h.NProc = r.Max
	}
	if socketPath == "" {
		return h
	}
	pid, err := peerPID(socketPath)
	if err != nil || pid <= 0 {
		return h
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return h
	}
	peer := parseProcLimits(string(b))
	return HostLimits{NoFile: minKnown(h.NoFile, peer.NoFile), NProc: minKnown(h.NProc, peer.NProc)}
}

// peerPID returns the pid of the process listening on a unix socket.
func peerPID(socketPath string) (int, error) {
	c, err := net.DialTimeout("unix", socketPath, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return int(cred.Pid), nil
}
