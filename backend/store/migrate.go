package store

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"go.etcd.io/bbolt"

	"cubicle/backend/fault"
)

// migration moves a file from schema version N to N+1 within one write transaction.
type migration struct {
	name string
	run  func(tx *bbolt.Tx) error
}

// migrations[i] migrates version i+1 to i+2; the latest version is len(migrations)+1.
// Append only: a released migration never changes.
var migrations = []migration{
	{name: "hybrid computer becomes vm + allowHostEnvironment; add node_settings", run: migrateHybridComputer},
	{name: "add the Local VM buckets vm_images, vm_instances and vm_bindings", run: migrateVMBuckets},
	{name: "add the buckets chat_sessions, tool_runs and app_settings", run: migrateChatBuckets},
	{name: "add the buckets session_revocations, host_grants, allow_rules and confirmations", run: migrateSecurityBuckets},
	{name: "add the bucket runners (execution nodes)", run: migrateRunnerBuckets},
	{name: "add the bucket knowledge (past runs)", run: migrateKnowledgeBucket},
	{name: "add the buckets group_chats and group_chat_entries", run: migrateGroupChatBuckets},
}

// currentBuckets are the buckets of the latest schema, created in a new file.
var currentBuckets = [][]byte{bucketMeta, bucketAccounts, bucketUsernames, bucketAgents, bucketNodeSettings,
	bucketVMImages, bucketVMInstances, bucketVMBindings, bucketChatSessions, bucketToolRuns, bucketAppSettings,
	bucketRevocations, bucketHostGrants, bucketAllowRules, bucketConfirmations, bucketRunners,
	bucketKnowledge, bucketGroupChats, bucketGroupEntries}

// prepare brings the opened file to the latest version of migs: a new file is initialised,
// an older one backed up and migrated, a newer one refused without being changed.
func (s *Store) prepare(migs []migration) error {
	latest := len(migs) + 1
	var ver int
	err := s.view("read schema version", func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketMeta) != nil {
			var err error
			ver, err = readVersion(tx)
			return err
		}
		return tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
			return fault.Conflict("%s is not a Cubicle data file (it has bucket %q but no schema version): "+
				"move it away or pass a different --data-dir", s.path, name)
		})
	})
	switch {
	case err != nil:
		return err
	case ver == 0:
		s.log.Info("new data file", "version", latest)
		return s.update("initialise data file", func(tx *bbolt.Tx) error {
			for _, b := range currentBuckets {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return writeVersion(tx, latest)
		})
	case ver > latest:
		return fault.Conflict("the data file %s has schema version %d, but this Cubicle knows only versions up to %d: "+
			"update Cubicle to open it", s.path, ver, latest)
	case ver == latest:
		return nil
	}

	bak, err := s.backup(ver)
	if err != nil {
		return err
	}
	s.log.Info("migrating data file", "from", ver, "to", latest, "backup", bak)
	for v := ver; v < latest; v++ {
		m := migs[v-1]
		err := s.update("migrate", func(tx *bbolt.Tx) error {
			if err := m.run(tx); err != nil {
				return err
			}
			return writeVersion(tx, v+1)
		})
		if err != nil {
			return fmt.Errorf("store: migrate %s from schema version %d to %d (%s): %w; "+
				"the file is left at version %d and a copy of the original is at %s", s.path, v, v+1, m.name, err, v, bak)
		}
		s.log.Info("migrated data file", "to", v+1, "migration", m.name)
	}
	return nil
}

// backup copies the file, as it is at version ver, to "<path>.bak-v<ver>" (mode 0600). It
// writes a temporary file, syncs it and renames it, so an existing backup is only ever
// replaced by a complete one.
func (s *Store) backup(ver int) (string, error) {
	dst := fmt.Sprintf("%s.bak-v%d", s.path, ver)
	tmp := dst + ".tmp"
	fail := func(err error) (string, error) {
		os.Remove(tmp)
		return "", fault.Unavailable("store: back up %s to %s before migrating: %v; "+
			"free some disk space or fix the directory's permissions and start Cubicle again", s.path, dst, err)
	}
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return fail(err)
	}
	if err := s.db.View(func(tx *bbolt.Tx) error { return tx.CopyFile(tmp, 0o600) }); err != nil {
		return fail(err)
	}
	f, err := os.Open(tmp)
	if err != nil {
		return fail(err)
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fail(err)
	}
	return dst, nil
}

func readVersion(tx *bbolt.Tx) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0, fmt.Errorf("store: the meta bucket is missing")
	}
	raw := meta.Get(keyVersion)
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("store: corrupt schema version %q", raw)
	}
	return v, nil
}

func writeVersion(tx *bbolt.Tx, v int) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	return meta.Put(keyVersion, []byte(strconv.Itoa(v)))
}

// migrateHybridComputer is version 1 → 2 (SPEC §1.11): an agent whose computer is "hybrid"
// becomes computer "vm" with allowHostEnvironment true; other agents are left byte for byte.
// Records are edited as generic JSON objects so fields this code does not know survive.
func migrateHybridComputer(tx *bbolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketNodeSettings); err != nil {
		return err
	}
	b := tx.Bucket(bucketAgents)
	if b == nil {
		return fmt.Errorf("the agents bucket is missing")
	}
	changed := map[string][]byte{}
	err := b.ForEach(func(k, raw []byte) error {
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(raw, &rec); err != nil {
			return fmt.Errorf("agent %q: corrupt record: %w", k, err)
		}
		var computer string
		if c, ok := rec["computer"]; !ok || json.Unmarshal(c, &computer) != nil || computer != "hybrid" {
			return nil
		}
		rec["computer"] = json.RawMessage(`"vm"`)
		rec["allowHostEnvironment"] = json.RawMessage(`true`)
		out, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		changed[string(k)] = out
		return nil
	})
	if err != nil {
		return err
	}
	for k, v := range changed { // bbolt forbids writes inside ForEach
		if err := b.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}
