package main

import (
	"strings"
	"testing"
)

// A binary's test2json events: a passing test (its log stays out of a failure's output), a
// failed subtest, and a test that never ended (the binary died while it ran).
const events = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"    ok_test.go:3: quiet line\n"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"--- PASS: TestOK (1.25s)\n"}
{"Action":"pass","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestBad/sub","Output":"    bad_test.go:4: boom\n"}
{"Action":"output","Package":"p","Test":"TestBad/sub","Output":"    --- FAIL: TestBad/sub (0.50s)\n"}
{"Action":"fail","Package":"p","Test":"TestBad/sub"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (0.75s)\n"}
{"Action":"fail","Package":"p","Test":"TestBad"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"p","Output":"panic: test timed out after 3s\n"}
{"Action":"fail","Package":"p"}
`

func TestParseEvents(t *testing.T) {
	r := parseEvents("p", []byte(events))
	fail := string(r.failLog)
	for _, want := range []string{"boom", "--- FAIL: TestBad (0.75s)", "=== RUN   TestHang", "panic: test timed out"} {
		if !strings.Contains(fail, want) {
			t.Errorf("a failure's output lacks %q:\n%s", want, fail)
		}
	}
	if strings.Contains(fail, "quiet line") {
		t.Errorf("a failure's output has the passing test's log:\n%s", fail)
	}
	if !strings.Contains(string(r.log), "quiet line") || !strings.Contains(string(r.log), "boom") {
		t.Errorf("the whole log lacks lines:\n%s", r.log)
	}
	got := map[string]float64{}
	for _, tt := range r.tests {
		got[tt.Test] = tt.Seconds
	}
	if len(got) != 2 || got["TestOK"] != 1.25 || got["TestBad"] != 0.75 {
		t.Errorf("top-level times %v, want TestOK 1.25 and TestBad 0.75 (no subtests, none for a test that never ended)", got)
	}
}
