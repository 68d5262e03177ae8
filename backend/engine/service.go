package engine

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"cubicle/backend/fault"
)

// OwnedService is a Podman API service the app started itself because podman is installed
// but no service answered. It runs until Close.
type OwnedService struct {
	socket string // unix:// URI
	cmd    *exec.Cmd
	logger *slog.Logger
	done   chan struct{} // closed when the process has exited and its output is drained
	err    error         // the process's exit error; read after done is closed

	closeOnce sync.Once
}

// DefaultOwnedSocket is where the app puts the socket of a Podman service it starts:
// /run/cubicle/podman.sock for root, $XDG_RUNTIME_DIR/cubicle/podman.sock otherwise. It stays
// apart from the system's own sockets so that it never collides with a service started later
// by systemd.
func DefaultOwnedSocket(getenv func(string) string, uid int) string {
	if uid == 0 {
		return "/run/cubicle/podman.sock"
	}
	dir := getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = fmt.Sprintf("/run/user/%d", uid)
	}
	return filepath.Join(dir, "cubicle", "podman.sock")
}

// StartPodmanService starts `podman system service --time=0 unix://<socketPath>` and waits
// (bounded by ctx) until it answers. Only Linux has it: elsewhere Podman runs in a VM (Podman
// machine) and StartPodmanService is fault.ErrUnavailable saying how to start that. A socket that answers already is refused with
// fault.ErrExists (use it instead); a stale socket file is replaced. The service's output goes
// to logger at debug level. Close stops the process and waits for it.
func StartPodmanService(ctx context.Context, socketPath string, logger *slog.Logger) (*OwnedService, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	op := "start podman service on " + socketPath
	if err := ownedServiceSupported(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, fault.Unavailable("podman is not installed (Debian/Ubuntu: sudo apt-get install podman)"))
	}
	uri := "unix://" + socketPath
	if _, _, _, err := Ping(ctx, uri, 500*time.Millisecond); err == nil {
		return nil, fmt.Errorf("%s: %w", op, fault.Exists("an engine already answers on %s", socketPath))
	}
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", op, fault.Unavailable("cannot create the socket directory: %v", err))
	}
	if fi, err := os.Lstat(socketPath); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		_ = os.Remove(socketPath) // stale: nothing answered above
	}

	tail := &tailWriter{logger: logger, max: 4096}
	cmd := exec.Command(bin, "system", "service", "--time=0", uri)
	cmd.Stdout, cmd.Stderr = tail, tail
	cmd.SysProcAttr = serviceProcAttr()
	// The service outlives this process and every conmon it spawns inherits its working
	// directory: one that is removed later (a temp dir, a checkout) makes each container start
	// fail ("Failed to get working directory", "write child: broken pipe").
	cmd.Dir = os.TempDir()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, fault.Unavailable("cannot run podman: %v", err))
	}
	s := &OwnedService{socket: uri, cmd: cmd, logger: logger, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	logger.Info("started podman service", "socket", uri, "pid", cmd.Process.Pid)

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, _, _, err := Ping(ctx, uri, 500*time.Millisecond); err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s: %w", op, fault.Unavailable("podman service exited (%v): %s", s.err, tail.String()))
		case <-ctx.Done():
			s.Close()
			return nil, fmt.Errorf("%s: %w", op, fault.Unavailable("podman service did not answer in time: %v", ctx.Err()))
		case <-tick.C:
		}
	}
}

// Socket returns the unix:// URI the service listens on.
func (s *OwnedService) Socket() string { return s.socket }

// Done is closed when the service process has exited (after Close, or on its own).
func (s *OwnedService) Done() <-chan struct{} { return s.done }

// Close stops the service (SIGTERM, SIGKILL after 10 s) and waits until it has exited. It is
// safe to call more than once; containers the service started keep running.
func (s *OwnedService) Close() error {
	s.closeOnce.Do(func() {
		select {
		case <-s.done:
			return
		default:
		}
		_ = s.cmd.Process.Signal(stopSignal)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		_ = os.Remove(SocketPath(s.socket))
		s.logger.Info("stopped podman service", "socket", s.socket)
	})
	<-s.done
	return nil
}

// tailWriter logs the service's output line by line and keeps the last bytes for errors.
type tailWriter struct {
	logger *slog.Logger
	max    int

	mu   sync.Mutex // guards buf and line
	buf  []byte
	line []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = w.buf[over:]
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		w.logger.Debug("podman service", "line", string(w.line[:i]))
		w.line = w.line[i+1:]
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.TrimSpace(w.buf))
}
