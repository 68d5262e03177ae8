package images

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Progress is one progress report of Ensure.
type Progress struct {
	// Step is the phase: "base" (offline Debian base), "pull" (cursor base), "build N/M" (the
	// desktop system layer), "driver N/M" (the driver layer), "tag" or "done".
	Step string
	// Line is the raw output line (build output, debootstrap, pull), or a short note.
	Line string
	// Percent is the overall completion 0..100, or -1 when unknown.
	Percent float64
}

// Share of the bar taken by the phases before the recipe build.
const (
	basePercent   = 25.0 // building the offline base (debootstrap + import)
	pullPercent   = 20.0 // pulling the cursor base
	systemPercent = 95.0 // end of the system layer; the driver layer takes the rest
)

// reporter forwards progress to the caller's callback (nil: nowhere).
type reporter struct {
	fn  func(Progress)
	mu  sync.Mutex // serialises calls into fn: engine adapters may write from their goroutines
	pct float64    // last percentage reported; reports never go backwards
}

func newReporter(fn func(Progress)) *reporter { return &reporter{fn: fn} }

func (r *reporter) report(step, line string, pct float64) {
	if r.fn == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if pct >= 0 {
		if pct < r.pct {
			pct = r.pct
		}
		r.pct = pct
	}
	r.fn(Progress{Step: step, Line: line, Percent: pct})
}

// stepRe matches the build step markers of the engines:
// Podman/Buildah "STEP 3/9: RUN …", classic Docker "Step 3/9 : RUN …",
// BuildKit "#7 [3/5] RUN …" (also "[stage 3/5]").
var stepRe = regexp.MustCompile(`^(?:(?i:step)\s+(\d+)/(\d+)\s*:|#\d+\s+\[[^\]]*?(\d+)/(\d+)\])`)

// parseStep extracts "step n of m" from a build output line.
func parseStep(line string) (n, m int, ok bool) {
	s := stepRe.FindStringSubmatch(strings.TrimSpace(line))
	if s == nil {
		return 0, 0, false
	}
	a, b := s[1], s[2]
	if a == "" {
		a, b = s[3], s[4]
	}
	n, err1 := strconv.Atoi(a)
	m, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || m <= 0 || n <= 0 || n > m {
		return 0, 0, false
	}
	return n, m, true
}

// lineWriter is an io.Writer that cuts its input into lines and hands each to fn.
type lineWriter struct {
	mu  sync.Mutex // guards buf and serialises fn
	buf bytes.Buffer
	fn  func(line string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexAny(w.buf.Bytes(), "\r\n")
		if i < 0 {
			break
		}
		line := string(w.buf.Next(i + 1))
		if l := strings.TrimRight(line, "\r\n"); strings.TrimSpace(l) != "" {
			w.fn(l)
		}
	}
	return len(p), nil
}

// Flush hands a trailing line without newline to fn.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := strings.TrimSpace(w.buf.String()); l != "" {
		w.fn(l)
	}
	w.buf.Reset()
}

// writer reports every line under step with percentages growing from lo towards hi (unknown
// length: each line moves a little, never reaching hi).
func (r *reporter) writer(step string, lo, hi float64) *lineWriter {
	pct := lo
	return &lineWriter{fn: func(line string) {
		pct += (hi - pct) * 0.02
		r.report(step, line, pct)
	}}
}

// Weights of build steps in the progress bar: a RUN step (apt-get) takes far longer than the
// metadata steps (ENV, LABEL, USER…) and copies.
const (
	runWeight   = 20.0
	copyWeight  = 2.0
	otherWeight = 0.25
)

// stepWeight weighs a step by its instruction ("RUN …", "COPY …").
func stepWeight(instr string) float64 {
	f := strings.Fields(instr)
	if len(f) == 0 {
		return otherWeight
	}
	switch strings.ToUpper(f[0]) {
	case "RUN":
		return runWeight
	case "COPY", "ADD":
		return copyWeight
	}
	return otherWeight
}

// buildWriter reports build output: step markers set "<name> N/M" and move the percentage from
// lo towards hi; other lines keep the current step and creep towards its end. runs and copies
// are the RUN and COPY/ADD instruction counts of the Containerfile: with the engine's step
// total M they give every step its share of the bar (the engine counts steps the file does not
// show, such as the LABELs of the build's labels, as metadata steps).
func (r *reporter) buildWriter(name string, runs, copies int, lo, hi float64) *lineWriter {
	var (
		step      = fmt.Sprintf("%s 0/%d", name, runs+copies)
		pct, end  = lo, lo
		done      float64 // weight of the finished steps
		last      float64 // weight of the current step
		haveTotal bool
		total     float64
	)
	return &lineWriter{fn: func(line string) {
		if n, m, ok := parseStep(line); ok {
			if !haveTotal {
				others := max(m-runs-copies, 0)
				total = float64(runs)*runWeight + float64(copies)*copyWeight + float64(others)*otherWeight
				haveTotal = true
			}
			done += last
			last = stepWeight(stepRe.ReplaceAllString(strings.TrimSpace(line), ""))
			step = fmt.Sprintf("%s %d/%d", name, n, m)
			pct = lo + (hi-lo)*min(done/total, 1)
			end = lo + (hi-lo)*min((done+last)/total, 1)
		} else if haveTotal {
			pct += (end - pct) * 0.003
		}
		r.report(step, line, pct)
	}}
}

// debootstrapPercent maps debootstrap's phases onto 0..1 of the base phase.
func debootstrapPercent(line string, cur float64) float64 {
	switch {
	case strings.HasPrefix(line, "I: Retrieving Release"), strings.HasPrefix(line, "I: Checking"):
		return max(cur, 0.02)
	case strings.HasPrefix(line, "I: Retrieving"), strings.HasPrefix(line, "I: Validating"):
		return max(cur, min(cur+0.004, 0.35))
	case strings.HasPrefix(line, "I: Extracting"):
		return max(cur, min(max(cur, 0.35)+0.004, 0.5))
	case strings.HasPrefix(line, "I: Installing"), strings.HasPrefix(line, "I: Unpacking"):
		return max(cur, min(max(cur, 0.5)+0.004, 0.65))
	case strings.HasPrefix(line, "I: Configuring"):
		return max(cur, min(max(cur, 0.65)+0.004, 0.8))
	case strings.HasPrefix(line, "I: Base system installed"):
		return max(cur, 0.85)
	}
	return cur
}
