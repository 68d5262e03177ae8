package cli

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"

	"cubicle/backend"
	"cubicle/backend/fault"
	"cubicle/runner"
)

func runRunner(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "runner", "cubicle runner --server URL --token TOKEN [--name NAME] [--data-dir DIR] [--engine podman|docker|none] [--no-host-tools]")
	server := fs.String("server", e.getenv("CUBICLE_RUNNER_SERVER"), "the server's URL, e.g. http://192.0.2.10:8765 (env CUBICLE_RUNNER_SERVER)")
	token := fs.String("token", "", "the runner's token, shown once when it was added in Settings → Runners (or env CUBICLE_RUNNER_TOKEN, which other users cannot see in the process list)")
	name := fs.String("name", "", "a name for people (default: the host name)")
	dataDir := fs.String("data-dir", "", "where the runner keeps its data (default: <Cubicle data dir>/runner)")
	eng := fs.String("engine", "", "the container engine: podman, docker or none (default: $CUBICLE_ENGINE, else auto-detect)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	noHost := fs.Bool("no-host-tools", false, "run no host tools (host_shell, host files) of agents on this machine, and do not advertise them")
	if err := parse(fs, args); err != nil {
		return err
	}
	tok := cmp.Or(*token, e.getenv("CUBICLE_RUNNER_TOKEN"))
	if *server == "" || tok == "" {
		return fault.Invalid("cubicle runner needs --server URL and --token TOKEN: copy the command shown when the runner was added (Settings → Runners)")
	}
	log, err := newLogger(e.stderr, *logLevel)
	if err != nil {
		return err
	}
	dir := cmp.Or(*dataDir, filepath.Join(defaultDataDir(e.getenv), "runner"))
	r, err := runner.New(runner.Config{Server: *server, Token: tok, Name: *name, DataDir: dir, Engine: *eng, Version: Version, Logger: log,
		NoHostTools: *noHost, ConnectEngine: backend.ConnectRunnerEngine})
	if err != nil {
		return err
	}
	defer r.Close()
	fmt.Fprintf(e.stdout, "Cubicle runner %s (node %s) connecting to %s; data in %s\n", Version, r.NodeID(), *server, dir)
	return r.Run(ctx)
}
