package main

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// -again names a package of the run, one variable and a pattern; anything else is refused
// with what to write.
func TestAgainParses(t *testing.T) {
	ps := []testPkg{{Path: "cubicle/backend", Bin: "/b"}, {Path: "cubicle/backend/vm", Bin: "/v"}}
	p, err := again(ps, "cubicle/backend:CUBICLE_GUEST_LINK=exec:^(TestA|TestB)$")
	if err != nil {
		t.Fatal(err)
	}
	if p.Bin != "/b" || p.Env != "CUBICLE_GUEST_LINK=exec" || p.Run != "^(TestA|TestB)$" {
		t.Fatalf("again = %+v", p)
	}
	if p.Name() != "cubicle/backend (CUBICLE_GUEST_LINK=exec)" || ps[0].Name() != "cubicle/backend" {
		t.Fatalf("names %q, %q", p.Name(), ps[0].Name())
	}
	if logName(p) == logName(ps[0]) || logName(ps[0]) != "cubicle_backend.log" {
		t.Fatalf("log files %q, %q: the run again would overwrite the package's log", logName(p), logName(ps[0]))
	}
	for _, bad := range []string{"cubicle/backend", "cubicle/backend:X=1", "cubicle/backend:X:^T$", "cubicle/backend:X=1:", "cubicle/other:X=1:^T$", "cubicle/backend:X=1:(["} {
		if _, err := again(ps, bad); err == nil || !strings.Contains(err.Error(), "-again") {
			t.Errorf("again(%q) = %v, want an error naming the flag", bad, err)
		}
	}
}

// A run again gets its variable and its own pattern; the package's own run gets neither. The
// "binary" is a script that exits 0 only when both arrived.
func TestRunAgainGetsItsVariableAndPattern(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "p.test")
	script := "#!/bin/sh\ncase \" $* \" in *' -test.run=^TestA$ '*) ;; *) exit 3 ;; esac\n[ \"$TESTBIN_AGAIN_PROBE\" = yes ] || exit 4\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ps := []testPkg{{Path: "p", Dir: dir, Bin: bin}}
	p, err := again(ps, "p:TESTBIN_AGAIN_PROBE=yes:^TestA$")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if r := runOne(ctx, p, time.Minute, cmp.Or(p.Run, "^TestOther$"), ""); r.err != nil {
		t.Fatalf("the run again: %v (exit 3: its pattern did not arrive, 4: its variable did not)", r.err)
	}
	if r := runOne(ctx, ps[0], time.Minute, "^TestA$", ""); r.err == nil {
		t.Fatal("the package's own run got the run again's variable")
	}
}
