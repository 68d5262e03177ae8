package store

import (
	"encoding/json"
	"fmt"

	"go.etcd.io/bbolt"
)

// RunnerChannel is one update channel of the runners: the version its runners should run and
// the share of them (0..100) that gets it. Package release checks and applies them.
type RunnerChannel struct {
	Version        string `json:"version"`
	RolloutPercent int    `json:"rolloutPercent"`
}

// RunnerChannels are the release and canary channels an administrator set.
type RunnerChannels struct {
	Release   RunnerChannel `json:"release"`
	Canary    RunnerChannel `json:"canary"`
	UpdatedBy string        `json:"updatedBy,omitempty"`
}

var keyRunnerChannels = []byte("runner-channels")

// RunnerChannels returns the saved update channels; ok is false when none were saved.
func (s *Store) RunnerChannels() (c RunnerChannels, ok bool, err error) {
	err = s.view("get runner channels", func(tx *bbolt.Tx) error {
		raw := tx.Bucket(bucketAppSettings).Get(keyRunnerChannels)
		if raw == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(raw, &c)
	})
	return c, ok, err
}

// PutRunnerChannels saves the update channels.
func (s *Store) PutRunnerChannels(c RunnerChannels) error {
	raw, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("store: encode runner channels: %w", err)
	}
	return s.update("put runner channels", func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketAppSettings).Put(keyRunnerChannels, raw)
	})
}
