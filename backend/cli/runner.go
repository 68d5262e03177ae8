package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"cubicle/backend"
	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/runner"
)

func runRunner(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "runner", "cubicle runner --server URL --token TOKEN [--name NAME] [--data-dir DIR] [--engine podman|docker|none] [--no-host-tools]\n"+
		"       cubicle runner --server URL --token TOKEN --engine kubernetes --kubeconfig FILE --namespace NS --registry HOST […]")
	server := fs.String("server", e.getenv("CUBICLE_RUNNER_SERVER"), "the server's URL, e.g. http://192.0.2.10:8765 (env CUBICLE_RUNNER_SERVER)")
	token := fs.String("token", "", "the runner's token, shown once when it was added in Settings → Runners (or env CUBICLE_RUNNER_TOKEN, which other users cannot see in the process list)")
	name := fs.String("name", "", "a name for people (default: the host name)")
	dataDir := fs.String("data-dir", "", "where the runner keeps its data (default: <Cubicle data dir>/runner)")
	ef := addEngineFlags(fs)
	fs.Lookup("engine").Usage = "the desktops' engine: podman, docker, kubernetes (the desktops are Pods of a cluster) or none (default: $CUBICLE_ENGINE, else the one found)"
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	autoUpdate := fs.Bool("auto-update", false, "switch to the version the server's update channel offers this runner when it connects (download, verify SHA-256, replace this binary, restart)")
	noHost := fs.Bool("no-host-tools", false, "run no host tools (host_shell, host files) of agents on this machine, and do not advertise them")
	if err := parse(fs, args); err != nil {
		return err
	}
	tok := cmp.Or(*token, e.getenv("CUBICLE_RUNNER_TOKEN"))
	if *server == "" || tok == "" {
		return fault.Invalid("cubicle runner needs --server URL and --token TOKEN: copy the command shown when the runner was added (Settings → Runners)")
	}
	// as serve: the flags over the environment (CUBICLE_ENGINE, CUBICLE_KUBECONFIG, CUBICLE_KUBE_*)
	es := engineconn.OverlayEngine(engineconn.KubeEnv(e.getenv), ef.settings())
	if err := engineconn.CheckEngineSettings(es); err != nil {
		return err
	}
	log, err := newLogger(e.stderr, *logLevel)
	if err != nil {
		return err
	}
	dir := cmp.Or(*dataDir, filepath.Join(defaultDataDir(e.getenv), "runner"))
	var drop []string
	if v := e.getenv("CUBICLE_RUNNER_TEST_DROP_CAPS"); v != "" { // test-only: look like an older runner
		drop = strings.Split(v, ",")
	}
	r, err := runner.New(runner.Config{Server: *server, Token: tok, Name: *name, DataDir: dir, Engine: es.Kind, Kubernetes: es, Version: Version, Logger: log,
		NoHostTools: *noHost, ConnectEngine: backend.ConnectRunnerEngine, AutoUpdate: *autoUpdate, DropCapabilities: drop})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Cubicle runner %s (node %s) connecting to %s; data in %s\n", Version, r.NodeID(), *server, dir)
	err = r.Run(ctx)
	if !errors.Is(err, runner.ErrRestart) {
		r.Close()
		return err
	}
	// A verified new version replaced the executable: stop everything (the store's lock is
	// released) and start it with the same arguments.
	exe, xerr := r.Executable()
	if cerr := r.Close(); cerr != nil {
		log.Warn("close before restart", "err", cerr)
	}
	if xerr != nil {
		return xerr
	}
	fmt.Fprintf(e.stdout, "Cubicle runner %s restarting as the new version\n", Version)
	return runner.Reexec(exe, append([]string{"runner"}, args...))
}
