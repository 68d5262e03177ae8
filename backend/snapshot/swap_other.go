//go:build !linux

package snapshot

import "os"

// exchange swaps the directories a and b with two renames (no atomic exchange here): b is
// moved aside, a takes its place, and the old b ends at a. A process killed between the two
// leaves b missing with its old content at a; restores are only offered where the engine's
// volumes are on this machine's disk, which is Linux.
func exchange(a, b string) error {
	aside := b + stagingMark + "old"
	if err := os.Rename(b, aside); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		_ = os.Rename(aside, b)
		return err
	}
	return os.Rename(aside, a)
}
