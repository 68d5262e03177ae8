package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/restic/chunker"
)

// The chunker's parameters. The polynomial is fixed forever: another one cuts other chunks
// and nothing would deduplicate against what is stored. Chunks are 128 KiB to 4 MiB, 512 KiB
// on average (smaller than restic's 1 MiB: a workspace's edits are small).
const (
	chunkPol         = chunker.Pol(0x3DA3358B4DC173)
	chunkMin         = 128 << 10
	chunkMax         = 4 << 20
	chunkAverageBits = 19
)

func (s *Store) chunkPath(id string) string {
	return filepath.Join(s.dir, "chunks", id[:2], id)
}

// putChunk stores data under its SHA-256 unless a chunk of that id is stored already; it
// returns the id and the bytes it wrote (0 when the chunk was there).
func (s *Store) putChunk(data []byte, buf []byte) (id string, written int64, out []byte, err error) {
	sum := sha256.Sum256(data)
	id = hex.EncodeToString(sum[:])
	p := s.chunkPath(id)
	if _, err := os.Stat(p); err == nil {
		return id, 0, buf, nil
	}
	buf = s.enc.EncodeAll(data, buf[:0])
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", 0, buf, fmt.Errorf("store chunk: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return "", 0, buf, fmt.Errorf("store chunk: %w", err)
	}
	_, err = tmp.Write(buf)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", 0, buf, fmt.Errorf("store chunk: %w", err)
	}
	return id, int64(len(buf)), buf, nil
}

// readChunk returns chunk id's plaintext, checked against its id: a missing, undecodable or
// altered chunk is ErrCorrupt.
func (s *Store) readChunk(id string, dst []byte) ([]byte, error) {
	if len(id) != 64 {
		return nil, fmt.Errorf("chunk %q: %w: not a chunk id", id, ErrCorrupt)
	}
	raw, err := os.ReadFile(s.chunkPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chunk %s: %w: it is missing from the store", id[:12], ErrCorrupt)
	}
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w", id[:12], err)
	}
	plain, err := s.dec.DecodeAll(raw, dst[:0])
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w: %v", id[:12], ErrCorrupt, err)
	}
	sum := sha256.Sum256(plain)
	if hex.EncodeToString(sum[:]) != id {
		return nil, fmt.Errorf("chunk %s: %w: its content does not match its hash", id[:12], ErrCorrupt)
	}
	return plain, nil
}

// chunkSize returns the bytes chunk id takes on disk (0 when missing).
func (s *Store) chunkSize(id string) int64 {
	st, err := os.Stat(s.chunkPath(id))
	if err != nil {
		return 0
	}
	return st.Size()
}
