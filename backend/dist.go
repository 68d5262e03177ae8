package backend

import (
	"os"
	"path/filepath"

	"cubicle/backend/release"
)

// newDist is what the server offers its runners to download: the configured dist directories,
// then the directory of the running executable (scripts/build.sh --runners writes the other
// platforms' binaries next to bin/cubicle), then the running executable itself.
func newDist(cfg Config) *release.Dist {
	dirs := append([]string{}, cfg.DistDirs...)
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dirs = append(dirs, filepath.Dir(exe))
	}
	return release.NewDist(release.DistConfig{Version: cfg.Version, Dirs: dirs})
}
