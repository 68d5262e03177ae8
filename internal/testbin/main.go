// Command testbin links each Go test binary once per content and runs the binaries as `go test`
// would (scripts/test.sh). `go test` relinks every test binary on every run, cached or not
// (the ./backend binary takes 45 s and more to link); testbin keeps the linked binaries in a
// cache directory keyed by everything the link reads — the build IDs of the test's main
// package and of every package it links, the Go version, GOOS/GOARCH, GOFLAGS and -race — so
// a binary is linked again only when something it contains changed.
//
//	testbin link [-race] PACKAGE…          prints "IMPORT-PATH BINARY" per package with tests
//	testbin run [-race] [-p N] [-timeout D] [-run RE] [-skip RE] [-logs DIR] [-slowest N] PACKAGE…
//
// run prints "ok  PKG  TIME" for a package that passed, and for one that failed the output of
// its failed tests (and of the package itself) and "FAIL  PKG  TIME"; each package's whole
// output (as go test -v) is in -logs DIR, with tests.tsv (each top-level test's time); the
// slowest tests are printed at the end. It runs N binaries
// at a time, the ones that took longest last time first (on a machine that has run none yet,
// the times in seed-durations.json, measured here on a run of the whole suite), and exits 1
// when any failed. A
// package's binary runs in the package's directory with -test.count=1: results never come
// from a cache.
//
// The key is sound because a build ID is the hash of a compile's inputs and output, and the
// link of a test binary reads nothing else but those packages' archives and the link flags.
package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "link":
		err = linkCmd(ctx, os.Args[2:])
	case "run":
		err = runCmd(ctx, os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testbin link [-race] PACKAGE… | testbin run [-race] [-p N] [-timeout D] [-run RE] [-skip RE] [-logs DIR] [-slowest N] PACKAGE…")
	os.Exit(2)
}

// cacheDir is where linked binaries are kept: $CUBICLE_TESTBIN_CACHE, else a folder of the
// machine's (root) or the user's cache.
func cacheDir() (string, error) {
	if d := os.Getenv("CUBICLE_TESTBIN_CACHE"); d != "" {
		return d, os.MkdirAll(d, 0o755)
	}
	d := "/var/cache/cubicle-testbin"
	if os.Geteuid() != 0 {
		uc, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		d = filepath.Join(uc, "cubicle-testbin")
	}
	return d, os.MkdirAll(d, 0o755)
}

// testPkg is a package with tests: where it is and its linked binary.
type testPkg struct {
	Path string // import path
	Dir  string
	Key  string
	Bin  string
}

// listed is one line of go list's answer.
type listed struct {
	ImportPath string
	BuildID    string
	Dir        string
	Deps       []string
}

// plan lists pkgs' test binaries and their cache keys (go list compiles what is not compiled
// yet; that is the compile `go test` would do anyway).
func plan(ctx context.Context, race bool, pkgs []string) ([]testPkg, error) {
	args := []string{"list", "-e", "-export", "-deps", "-test", "-json=ImportPath,BuildID,Dir,Deps,Error"}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	all := map[string]listed{}
	var order []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			listed
			Error *struct{ Err string }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		all[p.ImportPath] = p.listed
		order = append(order, p.ImportPath)
	}
	// the toolchain and target of the links (one `go env` for all four)
	goenv, err := exec.CommandContext(ctx, "go", "env", "GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	env := strings.Join([]string{string(goenv), os.Getenv("GOFLAGS"), fmt.Sprint(race), linkFlags}, "\x00")
	cache, err := cacheDir()
	if err != nil {
		return nil, err
	}
	var res []testPkg
	for _, ip := range order {
		root, ok := strings.CutSuffix(ip, ".test")
		if !ok || strings.Contains(ip, " ") {
			continue
		}
		main, rootPkg := all[ip], all[root]
		if main.BuildID == "" || rootPkg.Dir == "" {
			return nil, fmt.Errorf("go list gave no build ID for %s", ip)
		}
		h := sha256.New()
		io.WriteString(h, env)
		ids := []string{ip + " " + main.BuildID}
		for _, d := range main.Deps {
			dep, ok := all[d]
			if !ok || (dep.BuildID == "" && d != "unsafe" && d != "C") {
				return nil, fmt.Errorf("go list gave no build ID for %s (a dependency of %s)", d, ip)
			}
			ids = append(ids, d+" "+dep.BuildID)
		}
		slices.Sort(ids)
		for _, s := range ids {
			io.WriteString(h, "\x00"+s)
		}
		key := hex.EncodeToString(h.Sum(nil))[:32]
		res = append(res, testPkg{Path: root, Dir: rootPkg.Dir, Key: key,
			Bin: filepath.Join(cache, strings.ReplaceAll(root, "/", "_")+"-"+key+".test")})
	}
	return res, nil
}

// linkFlags: test binaries are linked without DWARF (-w), which takes a third less time and
// memory per link (measured on the api test binary: 58.6 s → 37.4 s under load). Stack traces,
// a timeout's goroutine dump and runtime.Caller read the pclntab, which stays; only a debugger
// needs DWARF (go test -c builds one with it).
const linkFlags = "-w"

// link links the binaries that are not in the cache yet, two at a time.
func link(ctx context.Context, race bool, ps []testPkg) error {
	var todo []testPkg
	for _, p := range ps {
		if _, err := os.Stat(p.Bin); err == nil {
			now := time.Now()
			os.Chtimes(p.Bin, now, now) // kept by the eviction below
			continue
		}
		todo = append(todo, p)
	}
	if len(todo) > 0 {
		fmt.Fprintf(os.Stderr, "testbin: linking %d of %d test binaries (the others are cached)\n", len(todo), len(ps))
	}
	errs := make([]error, len(todo))
	sem := make(chan struct{}, max(1, runtime.NumCPU()))
	var wg sync.WaitGroup
	for i, p := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			tmp := p.Bin + fmt.Sprintf(".tmp%d", os.Getpid())
			args := []string{"test", "-c", "-ldflags=" + linkFlags, "-o", tmp}
			if race {
				args = append(args, "-race")
			}
			cmd := exec.CommandContext(ctx, "go", append(args, p.Path)...)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				os.Remove(tmp)
				errs[i] = fmt.Errorf("link %s: %w", p.Path, err)
				return
			}
			errs[i] = os.Rename(tmp, p.Bin)
		}()
	}
	wg.Wait()
	evict(filepath.Dir(ps[0].Bin), cacheMax())
	return errors.Join(errs...)
}

// evict removes binaries not used for three days, so changed code does not fill the disk,
// then the least recently used ones while the cache holds more than max bytes (a busy
// machine links a new set of ~60 binaries, ~3 GB, many times a day: 600 of them filled a
// disk in one day). The binaries of the run that just linked were touched now and go last.
func evict(dir string, max int64) {
	type bin struct {
		path string
		size int64
		used time.Time
	}
	var bins []bin
	var total int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !strings.Contains(e.Name(), ".test") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if time.Since(fi.ModTime()) > 72*time.Hour {
			os.Remove(p)
			continue
		}
		bins = append(bins, bin{p, fi.Size(), fi.ModTime()})
		total += fi.Size()
	}
	slices.SortFunc(bins, func(a, b bin) int { return a.used.Compare(b.used) })
	for _, b := range bins {
		if total <= max {
			break
		}
		if time.Since(b.used) < time.Hour {
			break // this run's own binaries (and a concurrent run's) stay
		}
		if os.Remove(b.path) == nil {
			total -= b.size
		}
	}
}

// cacheMax is the most bytes the cache keeps past its newest binaries:
// $CUBICLE_TESTBIN_CACHE_MAX_GB (default 10).
func cacheMax() int64 {
	gb := int64(10)
	if v, err := strconv.ParseInt(os.Getenv("CUBICLE_TESTBIN_CACHE_MAX_GB"), 10, 64); err == nil && v > 0 {
		gb = v
	}
	return gb << 30
}

func linkCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("link", flag.ExitOnError)
	race := fs.Bool("race", false, "link with the race detector")
	fs.Parse(args)
	ps, err := plan(ctx, *race, fs.Args())
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		return fmt.Errorf("no package with tests in %v", fs.Args())
	}
	if err := link(ctx, *race, ps); err != nil {
		return err
	}
	for _, p := range ps {
		fmt.Println(p.Path, p.Bin)
	}
	return nil
}

func runCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	race := fs.Bool("race", false, "link with the race detector")
	lanes := fs.Int("p", runtime.NumCPU(), "test binaries run at a time")
	timeout := fs.Duration("timeout", 10*time.Minute, "each binary's -test.timeout")
	run := fs.String("run", "", "-test.run")
	skip := fs.String("skip", "", "-test.skip")
	logs := fs.String("logs", "", "folder for each package's whole output (and tests.tsv: each test's time)")
	slowest := fs.Int("slowest", 10, "print the N slowest tests at the end (0: none)")
	fs.Parse(args)
	ps, err := plan(ctx, *race, fs.Args())
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		return fmt.Errorf("no package with tests in %v", fs.Args())
	}
	if err := link(ctx, *race, ps); err != nil {
		return err
	}
	if *logs != "" {
		if err := os.MkdirAll(*logs, 0o755); err != nil {
			return err
		}
	}
	durFile := filepath.Join(filepath.Dir(ps[0].Bin), map[bool]string{false: "durations.json", true: "durations-race.json"}[*race])
	last := loadDurations(durFile)
	longestFirst(ps, last, seedFor(*race))

	var mu sync.Mutex // guards the output, took, tests and failed
	took := map[string]float64{}
	var tests []testTime
	var failed []string
	sem := make(chan struct{}, max(1, *lanes))
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := runOne(ctx, p, *timeout, *run, *skip)
			mu.Lock()
			defer mu.Unlock()
			took[p.Path] = r.took.Seconds()
			tests = append(tests, r.tests...)
			if *logs != "" {
				os.WriteFile(filepath.Join(*logs, strings.ReplaceAll(p.Path, "/", "_")+".log"), r.log, 0o644)
			}
			if r.err != nil {
				os.Stdout.Write(r.failLog)
				fmt.Printf("FAIL\t%s\t%.1fs (%v)\n", p.Path, r.took.Seconds(), r.err)
				failed = append(failed, p.Path)
				return
			}
			fmt.Printf("ok  \t%s\t%.1fs\n", p.Path, r.took.Seconds())
		}()
	}
	wg.Wait()
	for k, v := range took {
		last[k] = v
	}
	saveDurations(durFile, last)
	slices.SortFunc(tests, func(a, b testTime) int { return cmp.Compare(b.Seconds, a.Seconds) })
	if *logs != "" {
		var b bytes.Buffer
		for _, t := range tests {
			fmt.Fprintf(&b, "%.1f\t%s\t%s\n", t.Seconds, t.Package, t.Test)
		}
		os.WriteFile(filepath.Join(*logs, "tests.tsv"), b.Bytes(), 0o644)
	}
	if n := min(*slowest, len(tests)); n > 0 {
		fmt.Printf("the %d slowest tests:\n", n)
		for _, t := range tests[:n] {
			fmt.Printf("  %7.1fs  %s %s\n", t.Seconds, t.Package, t.Test)
		}
	}
	if len(failed) > 0 {
		slices.Sort(failed)
		return fmt.Errorf("%d package(s) failed: %s", len(failed), strings.Join(failed, " "))
	}
	return nil
}

// testTime is how long one top-level test took.
type testTime struct {
	Package, Test string
	Seconds       float64
}

// result is one test binary's run: its whole output (as go test -v prints it), the output of
// its failed tests and of the package itself (what a failure prints), each top-level test's
// time, and the binary's own time and error.
type result struct {
	log, failLog []byte
	tests        []testTime
	took         time.Duration
	err          error
}

// runOne runs one test binary in its package's directory, as go test -json does: the binary
// writes test2json's framing (-test.v=test2json) into a pipe read by `go tool test2json`, so
// each line of output is known to belong to its test. The binary stays this process's child
// (the timeout's SIGQUIT reaches it, not the converter).
func runOne(ctx context.Context, p testPkg, timeout time.Duration, run, skip string) result {
	args := []string{"-test.paniconexit0", "-test.count=1", "-test.v=test2json", "-test.timeout=" + timeout.String()}
	if run != "" {
		args = append(args, "-test.run="+run)
	}
	if skip != "" {
		args = append(args, "-test.skip="+skip)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return result{err: err}
	}
	var js bytes.Buffer
	conv := exec.Command("go", "tool", "test2json", "-p", p.Path)
	conv.Stdin, conv.Stdout, conv.Stderr = pr, &js, os.Stderr
	if err := conv.Start(); err != nil {
		pr.Close()
		pw.Close()
		return result{err: fmt.Errorf("go tool test2json: %w", err)}
	}
	pr.Close()
	cmd := exec.CommandContext(ctx, p.Bin, args...)
	cmd.Dir = p.Dir
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) } // goroutine dump, as go test's timeout
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = pw, pw
	t0 := time.Now()
	err = cmd.Run()
	d := time.Since(t0)
	pw.Close()
	if cerr := conv.Wait(); cerr != nil && err == nil {
		err = fmt.Errorf("go tool test2json: %w", cerr)
	}
	r := parseEvents(p.Path, js.Bytes())
	r.took, r.err = d, err
	return r
}

var resultLine = regexp.MustCompile(`^--- (?:PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

// parseEvents reads test2json's events: the whole output; the output of the failed tests, of
// the tests that never ended and of the package itself; and each top-level test's time.
func parseEvents(pkg string, js []byte) result {
	type event struct{ Action, Test, Output string }
	var evs []event
	failed, ended := map[string]bool{}, map[string]bool{}
	var r result
	for _, line := range bytes.Split(js, []byte("\n")) {
		var e event
		if len(line) == 0 || json.Unmarshal(line, &e) != nil {
			continue
		}
		top, _, _ := strings.Cut(e.Test, "/")
		switch e.Action {
		case "output":
			evs = append(evs, e)
			r.log = append(r.log, e.Output...)
		case "fail":
			if e.Test != "" {
				failed[top] = true
			}
		}
		if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
			ended[e.Test] = true
		}
		// a top-level test's time, from its result line (test2json gives no Elapsed for the
		// binary's own framed output): "--- PASS: TestX (1.23s)"
		if e.Action == "output" && e.Test != "" && !strings.Contains(e.Test, "/") {
			if m := resultLine.FindStringSubmatch(e.Output); m != nil && m[1] == e.Test {
				secs, _ := strconv.ParseFloat(m[2], 64)
				r.tests = append(r.tests, testTime{Package: pkg, Test: e.Test, Seconds: secs})
			}
		}
	}
	for _, e := range evs {
		top, _, _ := strings.Cut(e.Test, "/")
		// a test that never ended was running when the binary died (a timeout's panic, a crash)
		if e.Test == "" || failed[top] || !ended[top] {
			r.failLog = append(r.failLog, e.Output...)
		}
	}
	return r
}

// seedDurations are each package's seconds in a whole run of scripts/test.sh on a machine of
// the CI kind ({"plain": {…}, "race": {…}}), for a machine with no times of its own: without
// them a fresh machine started its longest binaries last (backend/vm, 6 min, after the
// 18-min ./backend instead of beside it). Refresh them from test-artifacts' durations when
// the suite's shape changes; a package missing from them counts as short.
//
//go:embed seed-durations.json
var seedDurations []byte

// seedFor returns the seed times of the race or the plain pass.
func seedFor(race bool) map[string]float64 {
	var seed map[string]map[string]float64
	if err := json.Unmarshal(seedDurations, &seed); err != nil {
		panic("testbin: seed-durations.json: " + err.Error()) // embedded: a build defect
	}
	return seed[map[bool]string{false: "plain", true: "race"}[race]]
}

// longestFirst orders ps by the time each took last time, longest first (the run ends when
// its longest binary does, so that one starts early); a package this machine has no time for
// takes its seed time.
func longestFirst(ps []testPkg, last, seed map[string]float64) {
	took := func(p testPkg) float64 {
		if t, ok := last[p.Path]; ok {
			return t
		}
		return seed[p.Path]
	}
	slices.SortStableFunc(ps, func(a, b testPkg) int { return cmp.Compare(took(b), took(a)) })
}

func loadDurations(file string) map[string]float64 {
	m := map[string]float64{}
	if b, err := os.ReadFile(file); err == nil {
		json.Unmarshal(b, &m)
	}
	return m
}

func saveDurations(file string, m map[string]float64) {
	b, _ := json.MarshalIndent(m, "", " ")
	tmp := file + fmt.Sprintf(".tmp%d", os.Getpid())
	if os.WriteFile(tmp, b, 0o644) == nil {
		os.Rename(tmp, file)
	}
}
