// Package bench measures how fast Cubicle is on this machine and compares it, in the same
// run and the same container, with what other agent-desktop tools do (`cubicle bench`).
//
// A run prepares (or reuses) the standard desktop image, derives from it an image that also
// holds the peer tools (scrot, ImageMagick, xdotool — see PeerPackages; kept for the next run),
// and measures in containers of that image: cold start, restart and stop; the resume of a
// paused desktop against the engine's unpause; a file upload through the app's route against
// `podman cp`; a 1280x800 screenshot over the driver's bridge against scrot + convert; a
// click against forking xdotool; an exec round trip against `podman exec`; an agent step
// (the agent tool's action + settled screenshot) against action + a fixed 2 s sleep +
// screenshot; the live view over the real computer websocket (input → changed frame and pointer move → pointer message,
// sustained fps, idle bytes/s, bytes per second for a terminal printing the time and for a
// scrolling browser next to the version 1 stream and to x11vnc, the frame rate behind a
// 10 Mbit/s link); exec and live input through a `cubicle runner` in another network
// namespace next to the local desktop (relay.go); and the memory of an idle desktop and of this process. Every raw sample goes into the Report;
// docs/bench.md says what each row times and how to read it.
//
// The desktops are the product's own (vm.Manager, see desktop.go), so the cold start is the
// time a person's create takes. Everything a run creates is labelled LabelRun; its
// containers and volumes are removed when the run ends, also when ctx is cancelled (Ctrl+C).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/link"
	"cubicle/backend/vm"
	"cubicle/images"
)

// Engine is what a run needs from a container engine (backend/engine/podman and docker
// satisfy it). Missing objects are fault.ErrNotFound.
type Engine interface {
	vm.Engine // the desktops run through the product's manager
	RemoveVolume(ctx context.Context, name string) error
	ListVolumes(ctx context.Context, labels map[string]string) ([]string, error)
	BuildImage(ctx context.Context, spec engine.BuildSpec) (engine.Image, error)
	InspectImage(ctx context.Context, ref string) (engine.Image, error)
	ListImages(ctx context.Context, labels map[string]string) ([]engine.Image, error)
	RemoveImage(ctx context.Context, ref string) error
	// ExecAttach starts an attached exec session (the exec link's rows).
	ExecAttach(ctx context.Context, id string, spec engine.ExecSpec) (*engine.ExecStream, error)
}

// ImageBuilder prepares the standard image (*images.Builder satisfies it).
type ImageBuilder interface {
	Ensure(ctx context.Context, key images.Key, progress func(images.Progress)) (images.Result, error)
}

// Counts are how many samples a run takes of each kind.
type Counts struct {
	ColdStarts     int           // create → real screenshot; each is followed by a stop and a restart
	Fast           int           // our screenshots, clicks, execs (milliseconds each)
	Peer           int           // the peers' screenshots, clicks and `podman exec` (tens to hundreds of ms)
	AgentSteps     int           // our agent steps
	PeerAgentSteps int           // the peer's agent steps (over 2 s each)
	LiveInputs     int           // input → changed frame over the websocket
	LiveWindow     time.Duration // how long fps and idle traffic are counted
	Resumes        int           // resumes of a paused desktop, ours and the engine's unpause each
	Uploads        int           // uploads of the upload row's file, ours and the engine's cp each
}

// QuickCounts finish a run in well under 2 minutes with a prepared image (CI).
var QuickCounts = Counts{ColdStarts: 2, Fast: 40, Peer: 10, AgentSteps: 6, PeerAgentSteps: 3, LiveInputs: 10, LiveWindow: 4 * time.Second,
	Resumes: 5, Uploads: 3}

// FullCounts give p95 values worth reading (a few minutes).
var FullCounts = Counts{ColdStarts: 5, Fast: 200, Peer: 50, AgentSteps: 30, PeerAgentSteps: 10, LiveInputs: 50, LiveWindow: 10 * time.Second,
	Resumes: 20, Uploads: 5}

// Config configures a run. Engine and Images are required.
type Config struct {
	Engine Engine
	Images ImageBuilder
	// EngineKind names the engine; its CLI forks the exec peer (`podman exec`, `docker exec`).
	EngineKind engine.Kind
	// ExecCLI is the engine's command line program ("" = "podman" or "docker" after EngineKind).
	ExecCLI string
	Logger  *slog.Logger // nil discards
	// Progress gets one line per step, for people; nil discards.
	Progress io.Writer
	Quick    bool
	Counts   Counts // zero: QuickCounts or FullCounts after Quick
	// WorkDir holds the desktops' run directories (their driver sockets) and build contexts
	// ("" = os.TempDir()).
	WorkDir string
	// ReadyTimeout bounds the wait for a desktop's driver and first drawn screen (0 = 90 s).
	ReadyTimeout time.Duration
	// GuestLink is how the run's desktops' drivers are reached, as the app would reach them
	// (engineconn.GuestLinkChoice); the zero value is auto on a local Linux engine. The exec-link
	// rows open an exec link next to it.
	GuestLink link.Choice
	// Kube is the cluster of the Kubernetes rows (kube.go); nil: those rows say why they
	// were not measured (KubeMissing).
	Kube        *Kube
	KubeMissing string
	// RunnerCommand runs the cubicle program (e.g. its executable's path); the relay rows
	// (relay.go) append "runner" and its flags and start it in a network namespace. Empty:
	// those rows are skipped, saying why. RunnerEnv is added to that process's environment.
	RunnerCommand []string
	RunnerEnv     []string
	// Version is this program's version, recorded in the report.
	Version string
	// Command is the command line, recorded in the report.
	Command string
	// Only, when set, limits the run to the steps that measure these row ids (one cold start
	// always runs: the other steps need its desktop) and the report to these rows.
	Only []string
}

// runner is one run's state.
type runner struct {
	cfg     Config
	log     *slog.Logger
	id      string
	runRoot string
	rep     *Report

	fleet *fleet // the run's desktop manager (startFleet), nil before

	releasePeers func()   // ends this run's claim on its peers image (ensurePeers), nil before
	claims       []func() // prunePeers' claims on an image it removes

	mu      sync.Mutex
	created map[*desktop]struct{} // desktops to remove at the end; guarded by mu
}

// Run measures and returns the report. It fails with fault.ErrInvalid on a bad Config and
// with fault.ErrUnavailable when the engine, image or desktops do not work; on ctx's end it
// returns ctx's error. Containers it created are removed before it returns, in every case.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if cfg.Engine == nil || cfg.Images == nil {
		return nil, fault.Invalid("bench: Config.Engine and Config.Images are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	for _, id := range cfg.Only {
		if !slices.Contains(RowIDs(), id) {
			return nil, fault.Invalid("bench: no row %q; rows are %s", id, strings.Join(RowIDs(), ", "))
		}
	}
	if cfg.Counts == (Counts{}) {
		cfg.Counts = FullCounts
		if cfg.Quick {
			cfg.Counts = QuickCounts
		}
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = os.TempDir()
	}
	cfg.WorkDir = workDirAbs(cfg.WorkDir)
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	if cfg.EngineKind == "" {
		cfg.EngineKind = engine.Podman
	}
	if cfg.ExecCLI == "" {
		cfg.ExecCLI = string(cfg.EngineKind)
	}
	r := &runner{cfg: cfg, log: cfg.Logger, id: newID(), created: map[*desktop]struct{}{}}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fault.Unavailable("bench: create the work directory %s: %v", cfg.WorkDir, err)
	}
	r.runRoot, err = os.MkdirTemp(cfg.WorkDir, NamePrefix)
	if err != nil {
		return nil, fault.Unavailable("bench: create a directory in %s: %v", cfg.WorkDir, err)
	}
	os.Chmod(r.runRoot, 0o755)
	defer func() {
		if cerr := r.cleanup(); cerr != nil && err == nil {
			err = cerr
		}
		if r.releasePeers != nil {
			r.releasePeers() // after its containers are gone
		}
		os.RemoveAll(r.runRoot)
	}()
	return r.run(ctx)
}

// progress prints one line for people.
func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
}

func (r *runner) track(d *desktop) {
	r.mu.Lock()
	r.created[d] = struct{}{}
	r.mu.Unlock()
}

func (r *runner) untrack(d *desktop) {
	r.mu.Lock()
	delete(r.created, d)
	r.mu.Unlock()
}

// cleanup removes every desktop the run still has, stops its manager, and removes every
// container and volume carrying the run's label.
func (r *runner) cleanup() error {
	r.mu.Lock()
	left := make([]*desktop, 0, len(r.created))
	for d := range r.created {
		left = append(left, d)
	}
	r.mu.Unlock()
	var errs []string
	if r.fleet != nil {
		for _, d := range left {
			if err := r.remove(d); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if err := r.closeFleet(); err != nil {
		errs = append(errs, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := map[string]string{LabelRun: r.id}
	if cs, err := r.cfg.Engine.ListContainers(ctx, sel); err != nil {
		errs = append(errs, err.Error())
	} else {
		for _, c := range cs {
			if err := r.cfg.Engine.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
				errs = append(errs, err.Error())
			}
		}
	}
	if vs, err := r.cfg.Engine.ListVolumes(ctx, sel); err != nil {
		errs = append(errs, err.Error())
	} else {
		for _, v := range vs {
			if err := r.cfg.Engine.RemoveVolume(ctx, v); err != nil && !errors.Is(err, fault.ErrNotFound) {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fault.Unavailable("bench: clean-up: %s; remove what is left with `podman rm -f` and `podman volume rm` "+
			"(label %s=%s)", strings.Join(errs, "; "), LabelRun, r.id)
	}
	return nil
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	start := time.Now()
	mode := "full"
	if r.cfg.Quick {
		mode = "quick"
	}
	r.rep = &Report{Schema: 1, RunID: r.id, Mode: mode, Command: r.cfg.Command, Started: start.UTC(), Machine: r.machine(ctx)}
	r.progress("bench run %s (%s mode); its containers and volumes are labelled %s=%s", r.id, mode, LabelRun, r.id)

	r.progress("preparing the standard image (reused when present)")
	last := ""
	res, err := r.cfg.Images.Ensure(ctx, images.Standard, func(p images.Progress) {
		if p.Step != last {
			last = p.Step
			r.progress("  [%s] %s", p.Step, p.Line)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("bench: prepare the standard image: %w", err)
	}
	r.rep.Images.Standard, r.rep.Images.StandardID = res.Ref, res.ImageID
	r.progress("standard image %s (reused: %v)", res.Ref, res.Reused)

	peers, ref, reused, err := r.ensurePeers(ctx, res.ImageID)
	if err != nil {
		return nil, err
	}
	r.rep.Images.Peers, r.rep.Images.PeersID, r.rep.Images.PeersReused, r.rep.Images.PeersKept = ref, peers.ID, reused, true
	r.progress("peer tools image %s (reused: %v; kept for the next run)", ref, reused)

	if err := r.startFleet(ctx, ref, peers.ID); err != nil {
		return nil, fmt.Errorf("bench: start the desktop manager: %w", err)
	}
	d, err := r.lifecycle(ctx)
	if err != nil {
		return nil, err
	}
	for _, st := range r.steps() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !r.wanted(st.rows...) {
			continue
		}
		r.progress("measuring %s", st.what)
		t0 := time.Now()
		if err := st.run(ctx, d); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("bench: %s: %w", st.what, err)
		}
		r.progress("  (%s: %.1f s)", st.what, time.Since(t0).Seconds())
	}
	if len(r.cfg.Only) > 0 {
		r.rep.Rows = slices.DeleteFunc(r.rep.Rows, func(row Row) bool { return !r.wanted(row.ID) })
	}
	for i := range r.rep.Rows {
		r.rep.Rows[i].finish()
	}
	r.rep.Seconds = time.Since(start).Seconds()
	return r.rep, nil
}

// step is one measuring step after the desktop's lifecycle, with the row ids it adds.
type step struct {
	what string
	rows []string
	run  func(context.Context, *desktop) error
}

func (r *runner) steps() []step {
	return []step{
		{"memory of the idle desktop", []string{"memory_desktop_pss", "memory_desktop_rss"}, r.memory},
		{"resume of a paused desktop next to the engine's unpause", []string{RowResume}, r.resume},
		{"screenshots", []string{"screenshot_jpeg", "screenshot_png"}, r.screenshots},
		{"clicks", []string{"click"}, r.clicks},
		{"exec round trips", []string{"exec"}, r.execs},
		{"file upload through the app's route next to the engine's cp", []string{RowUploadThroughput}, r.uploads},
		{"agent steps", []string{"agent_step"}, r.agentSteps},
		{"MCP steps", []string{RowMCPStep}, r.mcpSteps},
		{"agent steps through the native model adapters", []string{RowAgentStepAnthropic, RowAgentStepResponses}, r.nativeSteps},
		{"host_shell in the host sandbox", []string{RowHostShellSandboxed}, r.hostShell},
		{"workspace snapshots next to volume export and import", []string{RowSnapshot1Pct, RowRestore1G, RowSnapshotStore}, r.snapshots},
		{"the clipboard through the live view next to xclip", []string{RowClipboardRoundtrip}, r.clipboard},
		{"live view", []string{"live_input", "live_pointer", "live_fps", "live_frame_size", "live_idle"}, r.liveView},
		{"live view: first frame and bytes (terminal, scrolling) next to x11vnc", []string{RowLiveFirstFrame, "live_bytes_terminal", "live_bytes_scroll"}, r.liveBytes},
		{"live view through a 10 Mbit/s link", []string{"live_fps_throttled"}, r.liveThrottled},
		{"recording (terminal, scrolling) and replay", []string{RowRecordCPU, RowRecordBytesTerminal, RowRecordBytesScroll, RowReplaySeek}, r.recordingRows},
		{"the exec link", []string{"exec_link_exec", "exec_link_screenshot_jpeg", "exec_link_live_input"}, r.execLink},
		{"the runner relay (a runner in another network namespace)", []string{RowRunnerExec, RowRunnerLiveInput}, r.relay},
		{"the kubernetes engine", []string{RowK8sColdStart, RowK8sExec}, r.kube},
		{"server start and restart (a real `cubicle serve`)", []string{RowServerStart, RowServerRestart}, r.serverStart},
		{"memory of this process", []string{"memory_cubicle_pss", "memory_cubicle_rss"}, r.selfMemory},
	}
}

// lifecycleRows are the rows of the lifecycle measurement, which always runs.
var lifecycleRows = []string{"cold_start", "restart", "stop"}

// RowIDs returns every row id a full run measures, in order.
func RowIDs() []string {
	ids := slices.Clone(lifecycleRows)
	for _, st := range (&runner{}).steps() {
		ids = append(ids, st.rows...)
	}
	return ids
}

// wanted reports whether any of ids is to be measured (all are without Config.Only).
func (r *runner) wanted(ids ...string) bool {
	if len(r.cfg.Only) == 0 {
		return true
	}
	for _, id := range ids {
		if slices.Contains(r.cfg.Only, id) {
			return true
		}
	}
	return false
}

// add appends a row.
func (r *runner) add(row Row) { r.rep.Rows = append(r.rep.Rows, row) }

// machine describes this host and the engine.
func (r *runner) machine(ctx context.Context) Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version(),
		Cubicle: r.cfg.Version, Engine: string(r.cfg.EngineKind)}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kib int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kib); err == nil {
			m.MemoryMiB = kib >> 10
		}
	}
	if info, err := r.cfg.Engine.Info(ctx); err == nil {
		m.EngineVersion = info.Version
		if info.Kind != "" {
			m.Engine = string(info.Kind)
		}
	}
	return m
}

// workDirAbs is the absolute form of dir (bind mounts need absolute paths).
func workDirAbs(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}
