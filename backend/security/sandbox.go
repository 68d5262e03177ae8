package security

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// HostSandbox returns the host sandbox's settings of node (the defaults when it has none).
func (s *Service) HostSandbox(node string) store.HostSandbox {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h := s.settings.HostSandbox[node]
	h.ReadWrite = slices.Clone(h.ReadWrite)
	return h
}

// mergeHostSandbox returns cur with the nodes of u replaced; a read-write path must be
// absolute and not the root (fault.ErrInvalid names it).
func mergeHostSandbox(cur, u map[string]store.HostSandbox) (map[string]store.HostSandbox, error) {
	out := maps.Clone(cur)
	if out == nil {
		out = map[string]store.HostSandbox{}
	}
	for node, h := range u {
		node = strings.TrimSpace(node)
		if node == "" {
			return nil, fault.Invalid("host sandbox settings: name the execution node (\"local\" is this server's own)")
		}
		var rw []string
		for _, p := range cleanList(h.ReadWrite) {
			if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
				return nil, fault.Invalid("host sandbox of %s: read-write path %q must be absolute", node, p)
			}
			if p = filepath.Clean(p); p == string(filepath.Separator) || filepath.Dir(p) == p {
				return nil, fault.Invalid("host sandbox of %s: the whole file system (%q) cannot be made writable; name the directories", node, p)
			}
			if !slices.Contains(rw, p) {
				rw = append(rw, p)
			}
		}
		h.ReadWrite = rw
		if !h.AllowNone && !h.NetworkOff && len(h.ReadWrite) == 0 {
			delete(out, node)
			continue
		}
		out[node] = h
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
