package backend

import (
	"context"
	"log/slog"
	"path/filepath"

	"cubicle/backend/engineconn"
	"cubicle/backend/housekeeping"
	"cubicle/images"
)

// NewHousekeeper sets up housekeeping (backend/housekeeping) for the data directory dataDir on
// a connected engine: records is the data directory's store (nil when it cannot be read). The
// images the current recipes build are never listed as unused. `cubicle doctor` and the
// backend (Settings → Local VM → Leftovers) share it.
func NewHousekeeper(eng engineconn.EngineClient, dataDir string, records housekeeping.Records, log *slog.Logger) (*housekeeping.Housekeeper, error) {
	keep := func(ctx context.Context) []string { return nil }
	if b, err := images.New(images.Config{Engine: eng, Logger: log, WorkDir: filepath.Join(dataDir, "images")}); err == nil {
		keep = func(ctx context.Context) []string {
			sts, err := b.List(ctx)
			if err != nil {
				return nil
			}
			var refs []string
			for _, st := range sts {
				refs = append(refs, st.Ref)
			}
			return refs
		}
	}
	cfg := housekeeping.Config{Engine: eng, DataDir: dataDir, Keep: keep, Logger: log}
	if records != nil {
		cfg.Records = records
	}
	return housekeeping.New(cfg)
}
