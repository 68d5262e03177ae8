package hostwall

import (
	"strings"
	"testing"
)

func TestCgroupNames(t *testing.T) {
	id := "1712974d4ee3b0b5e09f19eaf41e6c1969e72d3500f483ecf6b2fcb7b0abeeff"
	other := "2712974d4ee3b0b5e09f19eaf41e6c1969e72d3500f483ecf6b2fcb7b0abeeff"
	cases := []struct {
		name, cgroup, id string
		want             bool
	}{
		{"podman cgroupfs v1", "9:name=systemd:/libpod_parent/libpod-" + id + "\n8:pids:/libpod_parent/libpod-" + id + "\n", id, true},
		{"podman systemd v2", "0::/machine.slice/libpod-" + id + ".scope/container\n", id, true},
		{"docker cgroupfs", "0::/docker/" + id + "\n", id, true},
		{"docker systemd", "0::/system.slice/docker-" + id + ".scope\n", id, true},
		{"another container", "0::/docker/" + other + "\n", id, false},
		{"the id only as a prefix", "0::/docker/" + id + "0\n", id, false},
		{"the id inside a longer element", "0::/x" + id + "y\n", id, false},
		{"host process", "0::/user.slice/user-0.slice/session-1.scope\n", id, false},
		{"short id", "0::/docker/1712974d4ee3\n", "1712974d4ee3", false},
		{"empty id", "0::/docker/\n", "", false},
		{"non-hex id", "0::/docker/" + strings.Repeat("z", 64) + "\n", strings.Repeat("z", 64), false},
		{"id in the controller field only", id + ":x:/\n", id, false},
	}
	for _, c := range cases {
		if got := cgroupNames(c.cgroup, c.id); got != c.want {
			t.Errorf("%s: cgroupNames = %v, want %v", c.name, got, c.want)
		}
	}
}
