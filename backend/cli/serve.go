package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"cubicle/backend"
	"cubicle/backend/auth"
	"cubicle/backend/doctor"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// DefaultListen is where `cubicle serve` listens unless told otherwise.
const DefaultListen = "127.0.0.1:8765"

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func runServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "serve", "cubicle serve [--listen 127.0.0.1:8765] [--data-dir DIR] [--allowed-host NAME]… [--tls-cert FILE --tls-key FILE] [--trusted-proxy ADDR]… [--engine kubernetes --kubeconfig FILE --namespace NS --registry HOST …]")
	listen := fs.String("listen", defaultListen(e.getenv), "address to listen on; a non-loopback address needs an admin password set by you (CUBICLE_ADMIN_PASSWORD or an existing account)")
	dataDir := fs.String("data-dir", defaultDataDir(e.getenv), "where Cubicle keeps its data (env CUBICLE_DATA_DIR)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var hosts, proxies, dist listFlag
	fs.Var(&dist, "dist-dir", "a directory of runner binaries cubicle-<os>-<arch> (other versions in DIR/<version>/) offered for download to runners (repeatable; env CUBICLE_DIST_DIR); the directory of this executable is always searched")
	fs.Var(&hosts, "allowed-host", "a further host name the server answers to (repeatable), e.g. the name of a reverse proxy")
	fs.Var(&proxies, "trusted-proxy", "address or CIDR of a reverse proxy whose X-Forwarded-For/-Proto are believed (repeatable)")
	cert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM); needs --tls-key")
	key := fs.String("tls-key", "", "the certificate's private key (PEM)")
	ef := addEngineFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if (*cert == "") != (*key == "") {
		return fault.Invalid("--tls-cert and --tls-key go together: give both, or neither")
	}
	return serve(ctx, e, serveOptions{listen: *listen, dataDir: *dataDir, logLevel: *logLevel, hosts: hosts,
		proxies: proxies, tlsCert: *cert, tlsKey: *key, engine: ef.settings(), distDirs: distDirs(dist, e.getenv)})
}

// distDirs are the --dist-dir flags, else $CUBICLE_DIST_DIR.
func distDirs(flags []string, getenv func(string) string) []string {
	if len(flags) > 0 {
		return flags
	}
	if d := getenv("CUBICLE_DIST_DIR"); d != "" {
		return []string{d}
	}
	return nil
}

// defaultListen is $CUBICLE_LISTEN, else DefaultListen.
func defaultListen(getenv func(string) string) string {
	if l := getenv("CUBICLE_LISTEN"); l != "" {
		return l
	}
	return DefaultListen
}

type serveOptions struct {
	listen, dataDir, logLevel string
	hosts, proxies            []string
	tlsCert, tlsKey           string
	note                      string // printed before the URL (e.g. why the desktop app fell back to serve)
	engine                    store.EngineSettings
	distDirs                  []string
}

func serve(ctx context.Context, e *env, o serveOptions) error {
	log, err := newLogger(e.stderr, o.logLevel)
	if err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return fault.Invalid("--listen %q is not host:port (for example 127.0.0.1:8765)", o.listen)
	}
	loopback := isLoopback(host)
	allowed := append([]string{"localhost", "127.0.0.1", "::1"}, o.hosts...)
	if !loopback && host != "" && host != "0.0.0.0" && host != "::" {
		allowed = append(allowed, host)
	}
	var tlsCfg *tls.Config
	if o.tlsCert != "" {
		c, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return fault.Invalid("cannot load --tls-cert %s / --tls-key %s: %v", o.tlsCert, o.tlsKey, err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}
	}
	b, err := backend.New(backend.Config{
		DataDir: o.dataDir, Logger: log, Version: Version,
		Admin:               adminFromEnv(e.getenv),
		RequireChosenAdmin:  !loopback,
		AllowedHosts:        allowed,
		TrustedProxies:      o.proxies,
		SecureCookies:       tlsCfg != nil,
		Doctor:              doctorFunc(o.dataDir, e.getenv),
		Engine:              o.engine.Kind,
		Kubernetes:          o.engine,
		DistDirs:            o.distDirs,
		PrepareOnFirstStart: prepareOnFirstStart(e.getenv),
	})
	if err != nil {
		if !loopback && fault.Class(err) == fault.ErrForbidden {
			return fault.Forbidden("refusing to listen on %s without configured authentication: %v", o.listen, err)
		}
		return err
	}
	defer b.Close()
	if err := b.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fault.Unavailable("cannot listen on %s: %v (is another Cubicle or program using the port? pick another with --listen)", o.listen, err)
	}
	scheme := "http"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https"
	}
	if o.note != "" {
		fmt.Fprintln(e.stdout, o.note)
	}
	fmt.Fprintf(e.stdout, "Cubicle %s is running at %s\n", Version, strings.Replace(urlOf(ln.Addr()), "http://", scheme+"://", 1))
	printLogin(e, b.Bootstrap)
	if !loopback {
		fmt.Fprintf(e.stdout, "Listening beyond this machine. The server answers to host names: %s (add more with --allowed-host).\n", strings.Join(allowed, ", "))
		if tlsCfg == nil && len(o.proxies) == 0 {
			fmt.Fprintln(e.stdout, "Warning: without --tls-cert/--tls-key or a TLS proxy (--trusted-proxy), passwords and sessions cross the network in clear.")
		}
	}
	return b.Serve(ctx, ln)
}

// FirstRunPrepareEnv set to "off" keeps the first start of a data directory from preparing
// the standard image in the background (tests that only need a server set it).
const FirstRunPrepareEnv = "CUBICLE_FIRST_RUN_PREPARE"

func prepareOnFirstStart(getenv func(string) string) bool { return getenv(FirstRunPrepareEnv) != "off" }

func printLogin(e *env, r auth.BootstrapResult) {
	switch {
	case r.Generated:
		fmt.Fprintf(e.stdout, "Log in as %q with password %s\n(shown only now; it is stored hashed. It serves 127.0.0.1 only: to listen on a network, choose your own with `cubicle admin reset-password %s`, or under Account)\n", r.Username, r.Password, r.Username)
	case r.Created:
		fmt.Fprintf(e.stdout, "Log in as %q with the password from CUBICLE_ADMIN_PASSWORD\n", r.Username)
	default:
		fmt.Fprintf(e.stdout, "Log in as %q with your password\n", r.Username)
	}
}

func adminFromEnv(getenv func(string) string) auth.Bootstrap {
	return auth.Bootstrap{Username: getenv("CUBICLE_ADMIN_USER"), Password: getenv("CUBICLE_ADMIN_PASSWORD")}
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func urlOf(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return "http://" + a.String() + "/"
	}
	host := ta.IP.String()
	if ta.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(ta.Port)) + "/"
}

func doctorFunc(dataDir string, getenv func(string) string) func(ctx context.Context) doctor.Report {
	return func(ctx context.Context) doctor.Report {
		return doctor.Run(ctx, checkers(dataDir, getenv)...)
	}
}
