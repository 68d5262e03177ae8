//go:build linux

package engineconn

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"cubicle/backend/engine"
	"cubicle/backend/link"
	"cubicle/internal/testenv"
)

// sshd is an in-process SSH server standing in for a remote engine host: it authenticates
// one client key and forwards, as OpenSSH's sshd does for Podman, unix-socket channels
// (direct-streamlocal@openssh.com) to the socket asked for, and, as a Docker host does for
// docker's connection helper, `docker … system dial-stdio` sessions to the engine socket.
// The engine behind is a real Podman service (it speaks the Docker API too).
type sshd struct {
	addr    string
	engine  string // path of the engine's unix socket
	keyFile string // the client's private key (OpenSSH format)
	known   string // a known_hosts file naming this server

	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	execs []string   // commands the server was asked to run; guarded by mu
	conns []net.Conn // open client connections, closed at the end; guarded by mu
}

func startSSHD(t *testing.T, engineSocket string) *sshd {
	t.Helper()
	dir := testenv.TempDir(t)
	// One host key for every run: Podman's ssh layer trusts a new host on first use and
	// remembers it in the known_hosts of the HOME it saw first in this process (so often the
	// machine's, not the test's), under this run's port. A later run that gets the same port
	// with another key would be refused as a changed host.
	seed := sha256.Sum256([]byte("cubicle test sshd host key"))
	hostSigner, err := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed[:]))
	if err != nil {
		t.Fatal(err)
	}
	clientPub, clientPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(clientPriv, "cubicle test")
	if err != nil {
		t.Fatal(err)
	}
	s := &sshd{engine: engineSocket, keyFile: filepath.Join(dir, "id_ed25519"), known: filepath.Join(dir, "known_hosts")}
	if err := os.WriteFile(s.keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	authorized, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		t.Fatal(err)
	}
	conf := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		if string(key.Marshal()) == string(authorized.Marshal()) {
			return nil, nil
		}
		return nil, fmt.Errorf("unknown key")
	}}
	conf.AddHostKey(hostSigner)
	s.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = s.ln.Addr().String()
	host, port, _ := net.SplitHostPort(s.addr)
	line := fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(hostSigner.PublicKey()))
	if err := os.WriteFile(s.known, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c, conf)
			}()
		}
	}()
	t.Cleanup(func() {
		s.ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close() // a client that keeps its connection (the bindings do) must not hang the test
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *sshd) serve(c net.Conn, conf *ssh.ServerConfig) {
	defer c.Close()
	sc, chans, reqs, err := ssh.NewServerConn(c, conf)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nc := range chans {
		switch nc.ChannelType() {
		case "direct-streamlocal@openssh.com":
			var req struct {
				SocketPath string
				Reserved0  string
				Reserved1  uint32
			}
			if ssh.Unmarshal(nc.ExtraData(), &req) != nil {
				nc.Reject(ssh.ConnectionFailed, "bad request")
				continue
			}
			up, err := net.Dial("unix", req.SocketPath)
			if err != nil {
				nc.Reject(ssh.ConnectionFailed, err.Error())
				continue
			}
			ch, creqs, err := nc.Accept()
			if err != nil {
				up.Close()
				continue
			}
			go ssh.DiscardRequests(creqs)
			wg.Add(1)
			go func() {
				defer wg.Done()
				bridge(ch, up)
			}()
		case "session":
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.session(ch, creqs)
			}()
		default:
			nc.Reject(ssh.UnknownChannelType, "not here")
		}
	}
}

// session runs `docker … system dial-stdio`: the channel becomes a stream to the engine.
func (s *sshd) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			req.Reply(req.Type == "env", nil)
			continue
		}
		var cmd struct{ Command string }
		ssh.Unmarshal(req.Payload, &cmd)
		s.mu.Lock()
		s.execs = append(s.execs, cmd.Command)
		s.mu.Unlock()
		if !strings.HasPrefix(cmd.Command, "docker") || !strings.HasSuffix(cmd.Command, "system dial-stdio") {
			req.Reply(true, nil)
			fmt.Fprintf(ch.Stderr(), "%s: not found\n", cmd.Command)
			ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{127}))
			return
		}
		up, err := net.Dial("unix", s.engine)
		if err != nil {
			req.Reply(false, nil)
			return
		}
		req.Reply(true, nil)
		bridge(ch, up)
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
		return
	}
}

// bridge copies both ways until either side ends.
func bridge(ch ssh.Channel, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, ch); up.(*net.UnixConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(ch, up); ch.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
	up.Close()
}

// sshWrapper puts an `ssh` first on PATH that runs the real OpenSSH client with this
// server's known_hosts and key and no user configuration, as docker's connection helper
// runs plain `ssh`.
func (s *sshd) sshWrapper(t *testing.T) {
	t.Helper()
	real := testenv.Program(t, "ssh")
	bin := testenv.TempDir(t)
	script := fmt.Sprintf("#!/bin/sh\nexec %s -F /dev/null -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o BatchMode=yes -i %s \"$@\"\n",
		real, s.known, s.keyFile)
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// TestEnginesOverSSH reaches a real Podman service through ssh both ways the engine
// clients do it: Podman's bindings (their own ssh client, a unix-socket channel) for
// CONTAINER_HOST=ssh://…/path and docker's connection helper (the ssh command running
// `docker system dial-stdio`) for DOCKER_HOST=ssh://…; discovery finds each reachable and
// remote, and ConnectEngine drives it.
func TestEnginesOverSSH(t *testing.T) {
	testenv.Program(t, "podman")
	base := testenv.TempDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	svc, err := engine.StartPodmanService(ctx, filepath.Join(base, "svc", "podman.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	sockPath := engine.SocketPath(svc.Socket())
	srv := startSSHD(t, sockPath)
	srv.sshWrapper(t)
	home := testenv.TempDir(t) // the bindings keep known hosts in $HOME/.ssh
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	log := slog.New(slog.DiscardHandler)

	podmanURI := "ssh://tester@" + srv.addr + sockPath
	dockerURI := "ssh://tester@" + srv.addr
	uid := os.Getuid()
	eps, err := DiscoverEngines(ctx, engine.DiscoverOptions{
		Getenv: func(k string) string {
			return map[string]string{"CONTAINER_HOST": podmanURI, "CONTAINER_SSHKEY": srv.keyFile, "DOCKER_HOST": dockerURI, "HOME": home}[k]
		},
		LookPath: func(string) (string, error) { return "", exec.ErrNotFound }, UID: &uid,
		SystemRoot: testenv.TempDir(t), Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps[:2] {
		t.Log(ep.Describe())
	}
	if ep := eps[0]; ep.Socket != podmanURI || ep.Source != engine.SourceContainerHost || !ep.Reachable || ep.Kind != engine.Podman || ep.Version == "" || !ep.Remote {
		t.Errorf("CONTAINER_HOST over ssh: %+v", ep)
	}
	if ep := eps[1]; ep.Socket != dockerURI || ep.Source != engine.SourceDockerHost || !ep.Reachable || ep.Kind != engine.Podman || ep.Version == "" || !ep.Remote {
		t.Errorf("DOCKER_HOST over ssh (docker's helper, a Podman behind): %+v", ep)
	}
	srv.mu.Lock()
	execs := strings.Join(srv.execs, "\n")
	srv.mu.Unlock()
	if !strings.Contains(execs, "docker system dial-stdio") {
		t.Errorf("docker's helper did not run dial-stdio over ssh; the server ran %q", execs)
	}

	// Both adapters drive the engine over ssh.
	t.Setenv("CONTAINER_HOST", podmanURI)
	t.Setenv("CONTAINER_SSHKEY", srv.keyFile)
	ce, err := ConnectEngine(ctx, "podman", log)
	if err != nil {
		t.Fatalf("ConnectEngine over ssh (podman): %v", err)
	}
	info, err := ce.Client.Info(ctx)
	ce.Close()
	if err != nil || info.Kind != engine.Podman || info.Version == "" || ce.Endpoint.Socket != podmanURI || !ce.Endpoint.Remote {
		t.Fatalf("podman over ssh: %+v, %v (endpoint %+v)", info, err, ce.Endpoint)
	}
	t.Setenv("CONTAINER_HOST", "")
	t.Setenv("DOCKER_HOST", dockerURI)
	ce, err = ConnectEngine(ctx, "docker", log)
	if err != nil {
		t.Fatalf("ConnectEngine over ssh (docker): %v", err)
	}
	info, err = ce.Client.Info(ctx)
	ce.Close()
	if err != nil || info.Version == "" || ce.Endpoint.Socket != dockerURI {
		t.Fatalf("docker over ssh: %+v, %v (endpoint %+v)", info, err, ce.Endpoint)
	}

	// Without a key the Podman probe says what is missing instead of asking for a password.
	t.Setenv("CONTAINER_SSHKEY", "")
	ep := engine.Endpoint{Kind: engine.Podman, Socket: podmanURI, Source: engine.SourcePodmanConnection}
	if _, _, _, err := probeSSH(ctx, ep, 5*time.Second); err == nil || !strings.Contains(err.Error(), "no ssh key") {
		t.Errorf("podman ssh probe without a key: %v", err)
	}
}

// TestConnectEngineTCP drives a real Podman service listening on loopback TCP through both
// adapters, as CONTAINER_HOST=tcp://… and DOCKER_HOST=tcp://… (Podman's Docker-compatible
// API) name it.
func TestConnectEngineTCP(t *testing.T) {
	podman := testenv.Program(t, "podman")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uri := "tcp://" + ln.Addr().String()
	ln.Close()
	cmd := exec.Command(podman, "system", "service", "--time=0", uri)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		if _, _, _, err := engine.Ping(ctx, uri, time.Second); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatal("the podman service exited")
		case <-ctx.Done():
			t.Fatalf("no answer on %s", uri)
		case <-time.After(50 * time.Millisecond):
		}
	}
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct{ env, prefer string }{{"CONTAINER_HOST", "podman"}, {"DOCKER_HOST", "docker"}} {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv("CONTAINER_HOST", "")
			t.Setenv("DOCKER_HOST", "")
			t.Setenv(tt.env, uri)
			ce, err := ConnectEngine(ctx, tt.prefer, log)
			if err != nil {
				t.Fatal(err)
			}
			defer ce.Close()
			info, err := ce.Client.Info(ctx)
			if err != nil || info.Version == "" || ce.Endpoint.Socket != uri || !ce.Endpoint.Remote || ce.Endpoint.Source != tt.env {
				t.Fatalf("over tcp: %+v, %v (endpoint %+v)", info, err, ce.Endpoint)
			}
		})
	}
}

// TestGuestLinkChoiceFollowsDiscovery checks that the guest link follows what discovery says
// of the connected engine: the real local Podman service gets the socket link, and the same
// engine described as VM-backed or remote (as discovery marks Docker Desktop, Podman machine,
// Colima… and tcp/ssh endpoints) gets the exec link.
func TestGuestLinkChoiceFollowsDiscovery(t *testing.T) {
	testenv.PodmanService(t)
	t.Setenv("CONTAINER_HOST", "unix:///run/podman/podman.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ce, err := ConnectEngine(ctx, "podman", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ce.Close()
	if ce.Endpoint.VM || ce.Endpoint.Remote {
		t.Fatalf("the local rootful service is marked VM or remote: %+v", ce.Endpoint)
	}
	if c := GuestLinkChoice(ctx, link.Auto, ce); c.Primary != link.NameSocket || !c.Mount {
		t.Fatalf("local engine: %+v", c)
	}
	for _, tt := range []struct {
		name       string
		vm, remote bool
		because    string
	}{{"vm", true, false, "VM"}, {"remote", false, true, "remote"}} {
		marked := *ce
		marked.Endpoint.VM, marked.Endpoint.Remote = tt.vm, tt.remote
		c := GuestLinkChoice(ctx, link.Auto, &marked)
		if c.Primary != link.NameExec || c.Fallback != "" || c.Mount || !strings.Contains(c.Reason, tt.because) {
			t.Errorf("%s endpoint: %+v", tt.name, c)
		}
		if c := GuestLinkChoice(ctx, link.SocketMode, &marked); c.Primary != link.NameSocket {
			t.Errorf("%s endpoint, forced socket: %+v", tt.name, c)
		}
	}
}
