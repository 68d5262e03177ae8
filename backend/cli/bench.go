package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cubicle/backend/bench"
	"cubicle/backend/engine/docker"
	"cubicle/backend/engine/podman"
	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/backend/link"
	"cubicle/images"
)

// Both engine adapters can run the benchmark.
var (
	_ bench.Engine = (*podman.Client)(nil)
	_ bench.Engine = (*docker.Client)(nil)
)

// runBench is `cubicle bench [--quick] [--json FILE]`: prepare (or reuse) the standard image,
// measure Cubicle against the peers' methods in the same run, print the table (stdout; progress
// goes to stderr) and optionally write every raw sample as JSON. Ctrl+C stops the run and
// removes what it created. docs/bench.md describes each row.
func runBench(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench", "cubicle bench [--quick] [--only ROW,…] [--json FILE] [--markdown] [--engine podman|docker] [--work-dir DIR] [--kubeconfig FILE --namespace NS --registry HOST …]")
	quick := fs.Bool("quick", false, "few samples per row: finishes in under 2 minutes with a prepared image (CI)")
	jsonPath := fs.String("json", "", "also write the report with every raw sample, the summaries and the machine to FILE")
	markdown := fs.Bool("markdown", false, "print the table as Markdown (for the README)")
	dataDir := defaultDataDir(e.getenv)
	workDir := fs.String("work-dir", filepath.Join(dataDir, "bench"), "scratch space: the desktops' run directories, image build contexts")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error (to stderr)")
	kf := addEngineFlags(fs) // --engine is the local engine here; the cluster flags add the Kubernetes rows
	only := fs.String("only", "", "measure only these rows (comma-separated ids, e.g. live_bytes_terminal,agent_step; docs/bench.md lists them)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var onlyRows []string
	if *only != "" {
		onlyRows = strings.Split(*only, ",")
	}
	log, err := newLogger(e.stderr, *logLevel)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ks := engineconn.OverlayEngine(engineconn.KubeEnv(e.getenv), kf.settings())
	eng := ks.Kind
	if eng == "kubernetes" {
		eng = "" // the local engine runs the main rows
	}
	ce, err := engineconn.ConnectEngine(cctx, eng, log)
	cancel()
	if err != nil {
		return err
	}
	defer ce.Close()
	be, ok := ce.Client.(bench.Engine)
	if !ok {
		return fault.Unavailable("the %s adapter cannot run the benchmark (it lacks image listing)", ce.Endpoint.Kind)
	}
	b, err := images.New(images.Config{Engine: ce.Client, Logger: log, WorkDir: filepath.Join(dataDir, "images")})
	if err != nil {
		return err
	}
	cmd := "cubicle bench"
	if len(args) > 0 {
		cmd += " " + strings.Join(args, " ")
	}
	mode, err := link.ParseMode(e.getenv(link.EnvVar))
	if err != nil {
		return fault.Invalid("%v", err)
	}
	cfg := bench.Config{
		Engine: be, Images: b, EngineKind: ce.Endpoint.Kind, Logger: log, Progress: e.stderr,
		Quick: *quick, WorkDir: *workDir, Version: Version, Command: cmd, Only: onlyRows,
		GuestLink: engineconn.GuestLinkChoice(ctx, mode, ce),
	}
	// The relay rows start this program as `cubicle runner` in a network namespace.
	if exe, err := os.Executable(); err == nil {
		cfg.RunnerCommand = []string{exe}
	}
	// The Kubernetes rows run when a cluster is named (a kubeconfig and a registry, by flag
	// or CUBICLE_KUBECONFIG / CUBICLE_KUBE_REGISTRY); a named cluster that does not answer
	// fails the run.
	switch {
	case ks.Kubeconfig == "" || ks.Registry == "":
		cfg.KubeMissing = "no Kubernetes cluster given (--kubeconfig FILE --namespace NS --registry HOST, or CUBICLE_KUBECONFIG …)"
	default:
		ks.Kind = "kubernetes"
		kctx, kcancel := context.WithTimeout(ctx, 30*time.Second)
		kc, err := engineconn.ConnectEngineWith(kctx, ks, log)
		kcancel()
		if err != nil {
			return err
		}
		defer kc.Close()
		cfg.Kube = &bench.Kube{Engine: kc.Kube, Registry: ks.Registry, Insecure: ks.RegistryInsecure}
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bench interrupted (%w); the containers it created were removed", ctx.Err())
		}
		return err
	}
	if *jsonPath != "" {
		if err := rep.WriteJSON(*jsonPath); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "Cubicle %s, %s mode, %s, %d cores (%s), %s %s, load %s; %.0f s\n\n", Version, rep.Mode,
		rep.Started.Format("2006-01-02"), rep.Machine.Cores, rep.Machine.Kernel, rep.Machine.Engine, rep.Machine.EngineVersion,
		rep.Machine.LoadAvg, rep.Seconds)
	if *markdown {
		err = rep.WriteMarkdown(e.stdout)
	} else {
		err = rep.WriteTable(e.stdout)
	}
	if err != nil {
		return err
	}
	for _, w := range rep.Warnings {
		fmt.Fprintln(e.stdout, "warning:", w)
	}
	if *jsonPath != "" {
		fmt.Fprintf(e.stdout, "\nraw samples: %s\n", *jsonPath)
	}
	return nil
}
