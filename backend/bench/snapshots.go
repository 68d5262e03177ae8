package bench

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/snapshot"
	"cubicle/backend/vm"
)

// The workspace snapshot rows (issue 25): a snapshot after 1% of a workspace changed, a
// restore of the whole workspace, and the store's size after many turn snapshots, next to the
// engine's own `volume export` and `volume import` of the same volume.
const (
	RowSnapshot1Pct   = "snapshot_1pct"
	RowRestore1G      = "restore_1g"
	RowSnapshotStore  = "snapshot_store_turns"
	snapshotFileBytes = 256 << 10
)

// snapshotSize is the workspace of the snapshot rows: 1 GiB in a full run, 64 MiB in a quick
// one (the rows say which).
func (r *runner) snapshotSize() int64 {
	if r.cfg.Quick {
		return 64 << 20
	}
	return 1 << 30
}

// snapshotTurns is how many turn snapshots the store row takes (the target is for 100).
func (r *runner) snapshotTurns() int {
	if r.cfg.Quick {
		return 10
	}
	return 100
}

// workspaceContent fills b with text-like pseudo-random content: lines of words drawn from a
// vocabulary of 4096 made-up words, as source code and logs repeat their identifiers (random
// bytes would not compress at all, a repeated file would deduplicate too well).
func workspaceContent(rng *rand.Rand, b []byte) {
	const letters = "etaoinshrdlucmfwypvbgkqjxz_"
	var vocab [4096][]byte
	vr := rand.New(rand.NewSource(7)) // the same vocabulary every time
	for i := range vocab {
		w := make([]byte, 3+vr.Intn(8))
		for j := range w {
			w[j] = letters[vr.Intn(len(letters))]
		}
		vocab[i] = w
	}
	i := 0
	for i < len(b) {
		w := vocab[rng.Intn(len(vocab))]
		i += copy(b[i:], w)
		if i < len(b) {
			if rng.Intn(8) == 0 {
				b[i] = '\n'
			} else {
				b[i] = ' '
			}
			i++
		}
	}
}

// snapshots measures the snapshot rows on a volume of their own (labelled with the run, not
// mounted in a desktop), filled through its directory on this machine.
func (r *runner) snapshots(ctx context.Context, _ *desktop) error {
	rows := []string{RowSnapshot1Pct, RowRestore1G, RowSnapshotStore}
	skip := func(why string) error {
		for _, id := range rows {
			r.add(Row{ID: id, Title: id, Unit: UnitMS, Better: "lower", Skipped: true, Note: why})
		}
		return nil
	}
	vp, ok := r.cfg.Engine.(vm.VolumePather)
	if !ok {
		return skip("this engine does not say where its volumes are")
	}
	vol := NamePrefix + r.id + "-snapshots"
	labels := map[string]string{LabelRun: r.id}
	if err := r.cfg.Engine.EnsureVolume(ctx, vol, labels); err != nil {
		return err
	}
	dir, err := vp.VolumePath(ctx, vol)
	if err != nil {
		return err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return skip("the engine's volumes are not on this machine's disk (" + dir + ")")
	}
	storeDir := filepath.Join(r.runRoot, "snapshots")
	st, err := snapshot.Open(snapshot.Config{Dir: storeDir, Logger: r.log})
	if err != nil {
		return err
	}
	defer st.Close()
	size := r.snapshotSize()
	files := int(size / snapshotFileBytes)
	rng := rand.New(rand.NewSource(25))
	buf := make([]byte, snapshotFileBytes)
	r.progress("  writing a %d MiB workspace (%d files)", size>>20, files)
	for i := range files {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", i%32))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		workspaceContent(rng, buf)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d.txt", i)), buf, 0o644); err != nil {
			return err
		}
	}
	// change rewrites 1% of the files with new content (an agent's turn: edited files).
	change := func() error {
		for range max(1, files/100) {
			i := rng.Intn(files)
			workspaceContent(rng, buf)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("d%02d", i%32), fmt.Sprintf("f%05d.txt", i)), buf, 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	const owner = "bench"
	first, _, err := st.Take(ctx, owner, dir, snapshot.Options{Kind: snapshot.KindManual})
	if err != nil {
		return err
	}
	r.progress("  first snapshot: %d ms, %d MiB on disk", first.DurationMs, first.NewBytes>>20)

	samples := max(3, r.cfg.Counts.ColdStarts*2)
	var snap []float64
	for range samples {
		if err := change(); err != nil {
			return err
		}
		t0 := time.Now()
		if _, _, err := st.Take(ctx, owner, dir, snapshot.Options{Kind: snapshot.KindTurn}); err != nil {
			return err
		}
		snap = append(snap, ms(time.Since(t0)))
	}
	cli := r.cfg.ExecCLI
	tarFile := filepath.Join(r.runRoot, "volume.tar")
	var export []float64
	for range samples {
		t0 := time.Now()
		if out, err := exec.CommandContext(ctx, cli, "volume", "export", vol, "--output", tarFile).CombinedOutput(); err != nil {
			return fmt.Errorf("%s volume export: %v: %s", cli, err, out)
		}
		export = append(export, ms(time.Since(t0)))
	}
	mib := fmt.Sprintf("%d MiB", size>>20)
	r.add(Row{ID: RowSnapshot1Pct, Title: "workspace snapshot after 1% changed (" + mib + ")", Unit: UnitMS, Better: "lower",
		Ours:     Side{Method: fmt.Sprintf("snapshot.Store.Take of a %s volume (%d files of 256 KiB, text-like) after 1%% of its files were rewritten", mib, files), Samples: snap},
		PeerName: cli + " volume export", Peer: &Side{Method: cli + " volume export VOL --output FILE of the same volume (a whole tar each time)", Samples: export},
		Note: "target (1 GiB, full run): ≤ 2 s; a quick run measures 64 MiB"})

	// Restore: the newest snapshot over the volume (the content is swapped whole), next to
	// importing the export into an emptied volume.
	list, err := st.List(owner)
	if err != nil {
		return err
	}
	var restore, imp []float64
	for range samples {
		t0 := time.Now()
		if err := st.Replace(ctx, owner, list[len(list)/2].ID, dir, 0); err != nil {
			return err
		}
		restore = append(restore, ms(time.Since(t0)))
	}
	peerVol := vol + "-import"
	for range samples {
		_ = r.cfg.Engine.RemoveVolume(ctx, peerVol)
		if err := r.cfg.Engine.EnsureVolume(ctx, peerVol, labels); err != nil {
			return err
		}
		t0 := time.Now()
		if out, err := exec.CommandContext(ctx, cli, "volume", "import", peerVol, tarFile).CombinedOutput(); err != nil {
			return fmt.Errorf("%s volume import: %v: %s", cli, err, out)
		}
		imp = append(imp, ms(time.Since(t0)))
	}
	_ = r.cfg.Engine.RemoveVolume(ctx, peerVol)
	os.Remove(tarFile)
	r.add(Row{ID: RowRestore1G, Title: "workspace restore (" + mib + ")", Unit: UnitMS, Better: "lower",
		Ours:     Side{Method: "snapshot.Store.Replace: every chunk read, decompressed and hash-checked into a staging directory, swapped in with one rename", Samples: restore},
		PeerName: cli + " volume import", Peer: &Side{Method: cli + " volume import of the export's tar into an empty volume", Samples: imp},
		Note: "target (1 GiB, full run): ≤ 10 s; page cache warm for both"})

	// The store after many turns: 1% rewritten before each turn snapshot; the store keeps
	// them all (the policy is set to keep every one).
	turns := r.snapshotTurns()
	if _, err := st.SetPolicy(ctx, owner, snapshot.Policy{}); err != nil {
		return err
	}
	for range turns - len(list) {
		if err := change(); err != nil {
			return err
		}
		if _, _, err := st.Take(ctx, owner, dir, snapshot.Options{Kind: snapshot.KindTurn}); err != nil {
			return err
		}
	}
	used, err := st.DiskUsage()
	if err != nil {
		return err
	}
	manifests, _ := dirSize(filepath.Join(storeDir, "owners"))
	total := float64(used+manifests) / (1 << 20)
	n, _ := st.List(owner)
	r.add(Row{ID: RowSnapshotStore, Title: fmt.Sprintf("snapshot store after %d turn snapshots (%s workspace)", len(n), mib), Unit: UnitMiB, Better: "lower",
		Ours: Side{Method: fmt.Sprintf("bytes on disk of the chunks and manifests of %d snapshots, 1%% of the files rewritten before each", len(n)), Samples: []float64{total}},
		Note: fmt.Sprintf("target (100 turns of 1 GiB, full run): ≤ 1.3 GiB; the workspace itself is %s", mib)})
	return nil
}

// dirSize adds up the file sizes under dir.
func dirSize(dir string) (int64, error) {
	n, ok := engine.LocalDirSize(context.Background(), dir)
	if !ok {
		return 0, fmt.Errorf("cannot measure %s", dir)
	}
	return n, nil
}
