package mcpclient

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/guest"
)

// A stdio server runs inside the agent's desktop, which is its sandbox. The desktop's driver
// has no operation for a long-lived process with its stdin and stdout on the link, but it
// runs commands (exec) and opens tunnels to loopback ports (tunnel), over every transport a
// desktop is reached by (its socket, an exec session, a runner's relay, a Kubernetes pod). So
// a small bridge is started with exec — Perl, which every Debian desktop has (perl-base is
// essential) — that listens on a free loopback port, takes one connection, and replaces
// itself with the server, the connection as its stdin and stdout (stderr goes to a log next
// to it). The client reaches it through a tunnel. When the tunnel closes the server reads
// EOF and ends (and is killed, with its process group, at Close); when the server dies the
// tunnel ends, and the next use starts it again. It goes with the desktop when that stops.

// Desk is what starting a stdio server needs of a desktop (the binding's Desktop gives it).
type Desk struct {
	Exec   func(ctx context.Context, r guest.ExecRequest) (guest.ExecResult, error)
	Tunnel func(ctx context.Context, address string) (net.Conn, error)
}

// bridge is the Perl program described above: argv is the state file prefix, then the
// server's command and arguments.
const bridge = `use strict; use IO::Socket::INET;
my $f = shift @ARGV;
my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1, Proto => "tcp") or die "listen: $!\n";
open(my $p, ">", "$f.pid") or die "$f.pid: $!\n"; print $p $$; close $p;
open(my $o, ">", "$f.port.tmp") or die "$f.port: $!\n"; print $o $l->sockport; close $o;
rename("$f.port.tmp", "$f.port") or die "$f.port: $!\n";
$SIG{ALRM} = sub { die "nobody connected within 60 s\n" }; alarm 60;
my $c = $l->accept or die "accept: $!\n"; alarm 0; close $l; unlink "$f.port";
open(STDIN, "<&", $c) or die "stdin: $!\n"; open(STDOUT, ">&", $c) or die "stdout: $!\n"; close $c;
exec { $ARGV[0] } @ARGV or die "cannot run $ARGV[0]: $!\n";
`

// launch starts the bridge (stopping the process an earlier one left) and prints its port.
const launch = `b="$1"; f="$2"; shift 2
mkdir -p "${f%/*}" || exit 1
if [ -s "$f.pid" ]; then kill -TERM -- "-$(cat "$f.pid")" 2>/dev/null; fi
rm -f "$f.pid" "$f.port"
: >"$f.log"
setsid perl -e "$b" "$f" "$@" </dev/null >>"$f.log" 2>&1 &
i=0
while [ ! -s "$f.port" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
if [ -s "$f.port" ]; then cat "$f.port"; exit 0; fi
echo "the MCP server's bridge did not start:" >&2; tail -n 20 "$f.log" >&2; exit 1
`

// stateDir holds the bridges' pid, port and log files in the desktop.
const stateDir = "/tmp/cubicle-mcp"

var unsafeKey = regexp.MustCompile(`[^A-Za-z0-9-]`)

// StartInDesk starts p inside desktop d and returns its stdin and stdout as one stream.
func StartInDesk(ctx context.Context, d Desk, p Process) (*Proc, error) {
	if d.Exec == nil || d.Tunnel == nil {
		return nil, fault.Unavailable("this desktop cannot run stdio MCP servers (it has no tunnels)")
	}
	f := stateDir + "/" + unsafeKey.ReplaceAllString(p.Key, "-")
	argv := append([]string{"/bin/sh", "-c", launch, "sh", bridge, f, p.Command}, p.Args...)
	res, err := d.Exec(ctx, guest.ExecRequest{Command: argv, Env: p.Env, Timeout: 20 * time.Second})
	if err != nil {
		return nil, err
	}
	out := strings.TrimSpace(string(res.Stdout))
	port, perr := strconv.Atoi(out)
	if res.ExitCode != 0 || perr != nil || port <= 0 || port > 65535 {
		return nil, fault.Unavailable("the stdio server %q could not be started in the desktop: %s", p.Command,
			strings.TrimSpace(firstOf(string(res.Stderr), out, fmt.Sprintf("exit code %d", res.ExitCode))))
	}
	// The stream outlives the turn that started the server: it is opened apart from the
	// turn's cancellation (opening a tunnel has its own deadline).
	conn, err := d.Tunnel(context.WithoutCancel(ctx), net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	return &Proc{Conn: conn, desk: d, file: f}, nil
}

// Proc is a stdio server running in a desktop: its stdin (Write) and stdout (Read).
type Proc struct {
	net.Conn
	desk Desk
	file string
	once sync.Once
}

// Close closes the stream and stops the server's process group.
func (p *Proc) Close() error {
	err := p.Conn.Close()
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.desk.Exec(ctx, guest.ExecRequest{Command: []string{"/bin/sh", "-c",
			`if [ -s "$1.pid" ]; then kill -TERM -- "-$(cat "$1.pid")" 2>/dev/null; rm -f "$1.pid"; fi`, "sh", p.file}, Timeout: 5 * time.Second})
	})
	return err
}

// Log returns the end of the server's stderr (for a message when it did not answer).
func (p *Proc) Log(ctx context.Context) string {
	res, err := p.desk.Exec(ctx, guest.ExecRequest{Command: []string{"tail", "-c", "2000", p.file + ".log"}, Timeout: 5 * time.Second})
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(res.Stdout))
}
