package store_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"cubicle/backend/store"
	"cubicle/backend/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *store.Store {
		s, err := store.Open(filepath.Join(t.TempDir(), "cubicle.db"),
			store.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
