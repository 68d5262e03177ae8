package enginetest

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// testResources checks what housekeeping and the Desktops table read of the engine: a
// container's bind mounts (whose data directory owns it), its live resources, volumes with
// their labels, and volume sizes.
func (s *suite) testResources(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	vol := s.name("sized")
	if err := s.e.EnsureVolume(ctx, vol, s.withLabels(map[string]string{"org.example.kind": "workspace"})); err != nil {
		t.Fatalf("EnsureVolume: %v", err)
	}
	run := runDir(t)
	c, err := s.e.CreateContainer(ctx, engine.ContainerSpec{
		Name:  s.name("res"),
		Image: s.image,
		// 2 MiB into the volume, then a busy loop and a 4 MiB string held in memory.
		Command: []string{"/bin/sh", "-c", "dd if=/dev/zero of=/data/blob bs=1024 count=2048 2>/dev/null; " +
			"touch /run/cubicle/ready; x=$(head -c 4194304 /dev/zero | tr '\\0' a); while :; do :; done"},
		Labels:      s.labels,
		User:        "0",
		Mounts:      []engine.Mount{{Source: run, Target: "/run/cubicle"}},
		Volumes:     []engine.VolumeMount{{Name: vol, Target: "/data"}},
		Limits:      engine.Limits{MemoryBytes: 256 << 20, PIDs: 64},
		NetworkMode: "none",
		StopTimeout: time.Second,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	defer s.e.RemoveContainer(ctx, c.ID, true)

	if _, err := s.e.ContainerStats(ctx, c.ID); !errors.Is(err, fault.ErrConflict) && !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("ContainerStats(created, not running) = %v, want ErrConflict", err)
	}
	if err := s.e.StartContainer(ctx, c.ID); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	waitFile(t, filepath.Join(run, "ready"), 20*time.Second)

	in, err := s.e.InspectContainer(ctx, c.ID)
	if err != nil {
		t.Fatalf("InspectContainer: %v", err)
	}
	found := false
	for _, m := range in.Mounts {
		if m.Target == "/run/cubicle" {
			found = true
			if src, _ := filepath.EvalSymlinks(m.Source); src != mustEval(t, run) {
				t.Errorf("bind mount source %q, want %q", m.Source, run)
			}
		}
		if m.Target == "/data" {
			t.Errorf("a named volume is listed as a bind mount: %+v", m)
		}
	}
	if !found {
		t.Errorf("InspectContainer.Mounts = %+v: no /run/cubicle bind mount", in.Mounts)
	}
	if !slices.Contains(in.Volumes, engine.VolumeMount{Name: vol, Target: "/data"}) {
		t.Errorf("InspectContainer.Volumes = %+v: no %s at /data", in.Volumes, vol)
	}

	// The busy loop shows as CPU (sampled until it does: the first sample may cover no time).
	var st engine.Stats
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err = s.e.ContainerStats(ctx, c.ID)
		if err != nil {
			t.Fatalf("ContainerStats(running): %v", err)
		}
		if st.CPUPercent > 1 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("stats: cpu %.1f%%, memory %d of %d bytes, %d pids", st.CPUPercent, st.MemoryBytes, st.MemoryLimit, st.PIDs)
	if st.CPUPercent <= 1 {
		t.Errorf("a container in a busy loop uses %.2f%% CPU", st.CPUPercent)
	}
	if st.MemoryBytes < 1<<20 || st.MemoryBytes > 256<<20 {
		t.Errorf("memory %d bytes: not between 1 MiB and the 256 MiB limit", st.MemoryBytes)
	}
	if st.MemoryLimit != 256<<20 {
		t.Errorf("memory limit %d, want %d", st.MemoryLimit, 256<<20)
	}
	if st.PIDs < 1 {
		t.Errorf("pids %d", st.PIDs)
	}
	if _, err := s.e.ContainerStats(ctx, s.name("no-such")); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("ContainerStats(missing) = %v, want ErrNotFound", err)
	}

	vols, err := s.e.Volumes(ctx, map[string]string{LabelRun: s.run, "org.example.kind": "workspace"})
	if err != nil {
		t.Fatalf("Volumes: %v", err)
	}
	i := slices.IndexFunc(vols, func(v engine.Volume) bool { return v.Name == vol })
	if i < 0 {
		t.Fatalf("Volumes = %+v; want %s", vols, vol)
	}
	if v := vols[i]; v.Labels[engine.LabelManaged] != "true" || v.Labels["org.example.kind"] != "workspace" || v.CreatedAt.IsZero() {
		t.Errorf("volume %+v: labels or creation time missing", v)
	}
	if vs, err := s.e.Volumes(ctx, map[string]string{LabelRun: s.run, "org.example.kind": "other"}); err != nil || len(vs) != 0 {
		t.Errorf("Volumes(other label) = %+v, %v; want none", vs, err)
	}
	for _, names := range [][]string{{vol, s.name("no-such-volume")}, nil} {
		sizes, err := s.e.VolumeSizes(ctx, names)
		if err != nil {
			t.Fatalf("VolumeSizes(%v): %v", names, err)
		}
		if got, ok := sizes[vol]; !ok || got < 2<<20 {
			t.Errorf("VolumeSizes(%v)[%s] = %d (listed %v), want at least 2 MiB", names, vol, got, ok)
		}
		if _, ok := sizes[s.name("no-such-volume")]; ok {
			t.Errorf("VolumeSizes(%v) has a size for a volume that does not exist", names)
		}
	}
	if err := s.e.StopContainer(ctx, c.ID, time.Second); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, err := s.e.ContainerStats(ctx, c.ID); !errors.Is(err, fault.ErrConflict) {
		t.Errorf("ContainerStats(stopped) = %v, want ErrConflict", err)
	}
}

func mustEval(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
