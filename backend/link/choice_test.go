package link

import (
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	tests := []struct {
		name    string
		mode    Mode
		eng     Engine
		want    string
		fb      string
		mount   bool
		because string
	}{
		{"auto local podman", Auto, Engine{GOOS: "linux", Socket: "unix:///run/podman/podman.sock"}, NameSocket, NameExec, true, "local Linux engine"},
		{"auto local docker", Auto, Engine{GOOS: "linux", Socket: "unix:///var/run/docker.sock", OperatingSystem: "Debian GNU/Linux 12"}, NameSocket, NameExec, true, "local"},
		{"auto macOS", Auto, Engine{GOOS: "darwin", Socket: "unix:///Users/a/.docker/run/docker.sock"}, NameExec, "", false, "darwin"},
		{"auto windows", Auto, Engine{GOOS: "windows", Socket: "npipe:////./pipe/docker_engine"}, NameExec, "", false, "windows"},
		{"auto ssh", Auto, Engine{GOOS: "linux", Socket: "ssh://user@host/run/podman/podman.sock"}, NameExec, "", false, "remote"},
		{"auto tcp", Auto, Engine{GOOS: "linux", Socket: "tcp://10.0.0.2:2375"}, NameExec, "", false, "remote"},
		{"auto docker desktop linux", Auto, Engine{GOOS: "linux", Socket: "unix:///home/a/.docker/desktop/docker.sock", OperatingSystem: "Docker Desktop"}, NameExec, "", false, "Docker Desktop"},
		{"auto podman machine", Auto, Engine{GOOS: "linux", Socket: "unix:///run/user/1000/podman/machine/qemu/podman.sock"}, NameExec, "", false, "VM"},
		{"auto colima", Auto, Engine{GOOS: "linux", Socket: "unix:///home/a/.colima/default/docker.sock"}, NameExec, "", false, "VM"},
		{"auto VM from discovery", Auto, Engine{GOOS: "linux", Socket: "unix:///var/run/docker.sock", VM: true}, NameExec, "", false, "VM"},
		{"auto remote from discovery", Auto, Engine{GOOS: "linux", Socket: "unix:///run/podman/podman.sock", Remote: true}, NameExec, "", false, "remote"},
		{"forced socket remote", SocketMode, Engine{GOOS: "linux", Socket: "tcp://h:1"}, NameSocket, "", true, "=socket"},
		{"forced exec local", ExecMode, Engine{GOOS: "linux", Socket: "unix:///run/podman/podman.sock"}, NameExec, "", false, "=exec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Choose(tt.mode, tt.eng)
			if c.Primary != tt.want || c.Fallback != tt.fb || c.Mount != tt.mount || !strings.Contains(c.Reason, tt.because) {
				t.Fatalf("Choose = %+v", c)
			}
		})
	}
	for in, want := range map[string]Mode{"": Auto, "AUTO": Auto, " exec ": ExecMode, "socket": SocketMode} {
		if m, err := ParseMode(in); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %v, %v", in, m, err)
		}
	}
	if _, err := ParseMode("ssh"); err == nil || !strings.Contains(err.Error(), "auto, socket or exec") {
		t.Errorf("ParseMode(ssh) = %v", err)
	}
}
