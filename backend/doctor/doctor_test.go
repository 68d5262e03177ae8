package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/images/guest/x11/xvfbtest"
	"cubicle/internal/testenv"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestReportOK(t *testing.T) {
	r := Run(context.Background(),
		func(context.Context) []Check { return []Check{{Name: "a", Status: Warn, Required: true}} },
		func(context.Context) []Check { return []Check{{Name: "b", Status: Fail}} },
	)
	if !r.OK() || len(r.Checks) != 2 || r.Checks[0].Name != "a" {
		t.Fatalf("report = %+v", r)
	}
	r = Run(context.Background(), func(context.Context) []Check { return []Check{{Name: "c", Status: Fail, Required: true}} })
	if r.OK() {
		t.Fatal("a failed required check passed")
	}
}

func TestDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "data")
	if c := DataDir(dir)(context.Background())[0]; c.Status != OK {
		t.Fatalf("fresh dir: %+v", c)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if c := DataDir(filepath.Join(file, "sub"))(context.Background())[0]; c.Status != Fail || c.Fix == "" {
		t.Fatalf("dir under a file: %+v", c)
	}
}

func TestDisplay(t *testing.T) {
	ctx := context.Background()
	if c := Display(env(nil))(ctx)[0]; c.Status != Warn || c.Fix == "" {
		t.Fatalf("no display: %+v", c)
	}
	// A display number this test holds (no other test starts a server there) with no server.
	dead := fmt.Sprintf(":%d", xvfbtest.Reserve(t, 186))
	if c := Display(env(map[string]string{"DISPLAY": dead}))(ctx)[0]; c.Status != Warn {
		t.Fatalf("dead display: %+v", c)
	}
	live := xvfbtest.Start(t, 187, 320, 200)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := Display(env(map[string]string{"DISPLAY": live}))(ctx)[0]
		if c.Status == OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live Xvfb display: %+v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestEngineUnknownPreference(t *testing.T) {
	c := Engine("lxc", env(nil), nil)(context.Background())[0]
	if c.Status != Fail || !c.Required {
		t.Fatalf("bad CUBICLE_ENGINE: %+v", c)
	}
}

func TestEngineRealPodman(t *testing.T) {
	testenv.PodmanService(t)
	c := Engine("podman", os.Getenv, nil)(context.Background())[0]
	if c.Status != OK {
		t.Fatalf("podman: %+v", c)
	}
}

func TestGuestLink(t *testing.T) {
	if c := GuestLink("ssh", env(nil), nil)(context.Background())[0]; c.Status != Fail || !strings.Contains(c.Fix, "auto, socket or exec") {
		t.Fatalf("bad CUBICLE_GUEST_LINK: %+v", c)
	}
	none := func(ctx context.Context, opts engine.DiscoverOptions) ([]engine.Endpoint, error) {
		return []engine.Endpoint{{Kind: engine.Podman, Socket: "unix:///nowhere/podman.sock", Err: "no socket"}}, nil
	}
	if c := GuestLink("exec", env(nil), none)(context.Background())[0]; c.Status != Warn || !strings.Contains(c.Detail, "no engine answers yet; new desktops will use the exec link") {
		t.Errorf("forced exec, no engine: %+v", c)
	}
	wantAuto := "no engine answers yet, so the link is chosen when one does"
	if runtime.GOOS != "linux" {
		wantAuto = "new desktops will use the exec link: Cubicle runs on " + runtime.GOOS
	}
	if c := GuestLink("", env(nil), none)(context.Background())[0]; c.Status != Warn || !strings.Contains(c.Detail, wantAuto) {
		t.Errorf("auto, no engine: %+v, want %q", c, wantAuto)
	}
	testenv.PodmanService(t)
	getenv := func(k string) string {
		if k == "CUBICLE_ENGINE" {
			return "podman"
		}
		return os.Getenv(k)
	}
	tests := []struct{ mode, want string }{
		{"", "new desktops use the socket link (the exec link if a desktop's socket does not answer): a local Linux engine"},
		{"exec", "new desktops use the exec link: CUBICLE_GUEST_LINK=exec"},
		{"socket", "new desktops use the socket link: CUBICLE_GUEST_LINK=socket"},
	}
	for _, tt := range tests {
		c := GuestLink(tt.mode, getenv, nil)(context.Background())[0]
		if c.Status != OK || !strings.Contains(c.Detail, tt.want) {
			t.Errorf("mode %q: %+v, want %q", tt.mode, c, tt.want)
		}
	}
}

func TestInstallHint(t *testing.T) {
	for _, tc := range []struct {
		name, goos, release, want string
	}{
		{"debian", "linux", "PRETTY_NAME=\"Debian GNU/Linux 13\"\nID=debian\n", "sudo apt-get install -y podman"},
		{"ubuntu via ID_LIKE", "linux", "ID=pop\nID_LIKE=\"ubuntu debian\"\n", "sudo apt-get install -y podman"},
		{"fedora", "linux", "ID=fedora\n", "sudo dnf install -y podman"},
		{"rocky", "linux", "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n", "sudo dnf install -y podman"},
		{"arch", "linux", "ID=arch\n", "sudo pacman -S podman"},
		{"opensuse", "linux", "ID=\"opensuse-tumbleweed\"\nID_LIKE=\"opensuse suse\"\n", "sudo zypper install podman"},
		{"alpine", "linux", "ID=alpine\n", "sudo apk add podman"},
		{"unknown linux", "linux", "", "install your distribution's podman package"},
		{"macos", "darwin", "", "brew install podman"},
		{"windows", "windows", "", "winget install RedHat.Podman"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := InstallHint(tc.goos, tc.release); !strings.Contains(got, tc.want) {
				t.Fatalf("InstallHint(%s) = %q, want it to contain %q", tc.goos, got, tc.want)
			}
		})
	}
}
