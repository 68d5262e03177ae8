//go:build unix

package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"

	"cubicle/backend/engine"
)

// pruneEngine lists the given images and records removals; nothing else is called.
type pruneEngine struct {
	Engine
	images  []engine.Image
	removed []string
}

func (e *pruneEngine) ListImages(context.Context, map[string]string) ([]engine.Image, error) {
	return e.images, nil
}

func (e *pruneEngine) RemoveImage(_ context.Context, ref string) error {
	e.removed = append(e.removed, ref)
	return nil
}

// testPeersTag is a peers tag no real run uses; its lock file is removed at the end.
func testPeersTag(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	tag := PeersRepo + ":" + hex.EncodeToString(b)
	t.Cleanup(func() { os.Remove(peersLock(tag)) })
	return tag
}

// TestPrunePeersKeepsClaimedImages: a run (here the same process, through another open of
// the lock file, which flock treats alike) that claimed its peers image keeps it while a run
// with another standard image prunes the earlier ones; once released it is removed.
func TestPrunePeersKeepsClaimedImages(t *testing.T) {
	current, inUse, old := testPeersTag(t), testPeersTag(t), testPeersTag(t)
	eng := &pruneEngine{images: []engine.Image{
		{ID: "current", Names: []string{current}},
		{ID: "in-use", Names: []string{inUse, "127.0.0.1:5000/cubicle-bench-peers:x"}},
		{ID: "old", Names: []string{old}},
		{ID: "standard", Names: []string{"localhost/cubicle-desktop:standard-0123456789ab"}},
	}}
	r := &runner{cfg: Config{Engine: eng, Progress: io.Discard}, log: slog.New(slog.DiscardHandler)}

	release, err := usePeers(inUse)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := claimUnused(inUse); ok {
		t.Fatal("an image a run uses could be claimed for removal")
	}
	r.prunePeers(context.Background(), "current")
	if !slices.Equal(eng.removed, []string{"old"}) {
		t.Fatalf("removed %v while another run uses in-use: want only old", eng.removed)
	}
	if len(r.claims) != 0 {
		t.Fatalf("%d claims kept after pruning", len(r.claims))
	}

	release()
	eng.removed = nil
	r.prunePeers(context.Background(), "current")
	if !slices.Equal(eng.removed, []string{"in-use", "old"}) {
		t.Fatalf("removed %v after the run ended: want in-use and old", eng.removed)
	}
	// Pruning gave its claims back: a run can use the image again.
	release, err = usePeers(inUse)
	if err != nil {
		t.Fatal(err)
	}
	release()
}
