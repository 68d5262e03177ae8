package profile

import (
	"errors"
	"strings"
	"testing"

	"cubicle/backend/fault"
)

func TestCheckWorkDir(t *testing.T) {
	for in, want := range map[string]string{"": "", " . ": ".", "auto": "auto", "cwd": "cwd", "proj/a": "proj/a",
		"/srv/work": "/srv/work", "~/code": "~/code", "./x": "./x"} {
		if got, err := CheckWorkDir(in); err != nil || got != want {
			t.Errorf("CheckWorkDir(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"../etc", "a/../../b", "/x/..", "a\nb", "a\x00b", `C:\Users`, "~root/x", strings.Repeat("a", MaxWorkDir+1)} {
		if _, err := CheckWorkDir(bad); !errors.Is(err, fault.ErrInvalid) {
			t.Errorf("CheckWorkDir(%q) = %v, want invalid", bad, err)
		}
	}
}
