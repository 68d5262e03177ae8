// Package mcpconformance runs the official MCP conformance suite (npm
// @modelcontextprotocol/conformance, on the Node 22 it needs, both installed by `npm ci` in
// tests/mcp) against an MCP server reached over streamable HTTP, and holds its verdict to
// Cubicle's terms: the suite's own pass (its expected failures are a baseline file in
// tests/mcp), the scenarios that must pass did run and pass (an empty run, or one that skipped
// them, would pass the baseline too), and every other scenario failed only because it asked
// for a fixture that only the suite's reference server has. It is test code: the tests of
// /mcp (backend) and of `cubicle mcp` (backend/cli) use it.
package mcpconformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Suite says how to run the suite against one server.
type Suite struct {
	// URL is the server's streamable-HTTP endpoint (required).
	URL string
	// Baseline is the expected-failures file's name in tests/mcp (required).
	Baseline string
	// Artifacts is the results directory's name under test-artifacts (required); it is
	// emptied first.
	Artifacts string
	// Must are the scenarios (without the suite's "server-" prefix) that must run and pass.
	Must []string
	// Fixture matches the error message of a check that failed only because the scenario
	// asked for one of the reference server's fixtures; any other failure fails the test.
	Fixture *regexp.Regexp
	// OtherReason, when set, excuses the failures of the named scenarios (without "server-")
	// for a reason of their own: the map's value matches their checks' error messages.
	OtherReason map[string]*regexp.Regexp
}

// Fixtures is what a scenario that calls one of the reference server's fixtures fails with on
// a Go SDK server without them: tools and prompts named test_*, resources under test://, and the
// optional completions and resource-subscription capabilities.
var Fixtures = regexp.MustCompile(`unknown (tool|prompt) "test_|Resource not found|method not found: "(completion/complete|resources/subscribe)"`)

// Check is one check of a scenario, as the suite wrote it in the scenario's checks.json.
type Check struct {
	ID           string          `json:"id"`
	Status       string          `json:"status"`
	ErrorMessage string          `json:"errorMessage"`
	Details      json.RawMessage `json:"details"`
}

// Results are a run's scenarios (named without the suite's "server-" prefix).
type Results struct {
	Passed map[string]bool    // whether each scenario that ran passed
	Checks map[string][]Check // each scenario's checks
}

// Run runs the suite and checks its verdict as the package doc says.
func Run(t testing.TB, ctx context.Context, s Suite) Results {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "tests", "mcp")
	bin := filepath.Join(dir, "node_modules", ".bin")
	if _, err := os.Stat(filepath.Join(bin, "conformance")); err != nil {
		t.Fatalf("the conformance suite is not installed: run `npm ci` in tests/mcp (%v)", err)
	}
	out := filepath.Join(root, "test-artifacts", s.Artifacts)
	if err = os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "conformance"), "server", "--url", s.URL,
		"--expected-failures", filepath.Join(dir, s.Baseline), "-o", out)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the conformance suite failed (%v):\n%s", err, log)
	}
	res, err := verdicts(out, s, t.Errorf)
	if err != nil {
		t.Fatal(err)
	}
	passed := res.Passed
	if len(passed) < 20 {
		t.Errorf("only %d scenarios ran", len(passed))
	}
	for _, m := range s.Must {
		ok, found := passed[m]
		if !found {
			t.Errorf("scenario %s did not run (results: %v)", m, slices.Sorted(maps.Keys(passed)))
		} else if !ok {
			t.Errorf("scenario %s did not pass", m)
		}
	}
	if t.Failed() {
		t.Logf("suite output:\n%s", log)
	}
	return res
}

// repoRoot is the directory of go.mod above the working directory (a test runs in its
// package's directory; source paths may be trimmed from the binary).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("mcpconformance: no go.mod above the working directory")
		}
		dir = up
	}
}

// timestamp ends a scenario's results directory: server-<scenario>-2026-12-03T12-16-57-280Z.
var timestamp = regexp.MustCompile(`-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d+Z$`)

// verdicts reads each scenario's checks.json under out and reports (through errorf) every
// failed check that the suite's fixtures or the scenario's own reason do not explain.
func verdicts(out string, s Suite, errorf func(string, ...any)) (Results, error) {
	passed, all := map[string]bool{}, map[string][]Check{}
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(p) != "checks.json" {
			return err
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var checks []Check
		if err := json.Unmarshal(raw, &checks); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		scenario := strings.TrimPrefix(timestamp.ReplaceAllString(filepath.Base(filepath.Dir(p)), ""), "server-")
		ok := len(checks) > 0
		for _, c := range checks {
			if c.Status == "SUCCESS" || c.Status == "INFO" {
				continue
			}
			ok = false
			if s.Fixture.MatchString(c.ErrorMessage) {
				continue
			}
			if re := s.OtherReason[scenario]; re != nil && re.MatchString(c.ErrorMessage) {
				continue
			}
			errorf("scenario %s failed for another reason than a missing fixture: %s %s", scenario, c.Status, c.ErrorMessage)
		}
		passed[scenario], all[scenario] = ok, checks
		return nil
	})
	return Results{Passed: passed, Checks: all}, err
}
