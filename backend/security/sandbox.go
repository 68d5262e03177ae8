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
	h.ReadWrite, h.Read = slices.Clone(h.ReadWrite), slices.Clone(h.Read)
	return h
}

// HostSandboxes returns every node's host sandbox settings that differ from the defaults.
func (s *Service) HostSandboxes() map[string]store.HostSandbox { return s.View().HostSandbox }

// WidenHostSandbox adds path to node's read-write paths (write) or to the credential folders
// opened for reading (not write) — an approved widening — or with revoke takes it away again,
// under Update's checks. The caller decides whether path may be widened at all (never Cubicle's
// data or a protected path). It returns the node's settings as they now are.
func (s *Service) WidenHostSandbox(by, node, path string, write, revoke bool) (store.HostSandbox, error) {
	s.widen.Lock()
	defer s.widen.Unlock()
	h := s.HostSandbox(node)
	list := &h.Read
	if write {
		list = &h.ReadWrite
	}
	has := slices.Contains(*list, path)
	switch {
	case revoke && !has:
		return h, fault.NotFound("%s is not among the widened paths of %s", path, node)
	case revoke:
		*list = slices.DeleteFunc(*list, func(p string) bool { return p == path })
	case !has:
		*list = append(*list, path)
	}
	u := map[string]store.HostSandbox{node: h}
	v, err := s.Update(by, Update{HostSandbox: &u})
	if err != nil {
		return store.HostSandbox{}, err
	}
	return v.HostSandbox[node], nil
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
		var rd []string
		for _, p := range cleanList(h.Read) {
			if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
				return nil, fault.Invalid("host sandbox of %s: readable path %q must be absolute", node, p)
			}
			if p = filepath.Clean(p); !slices.Contains(rd, p) {
				rd = append(rd, p)
			}
		}
		h.Read = rd
		if !h.AllowNone && !h.NetworkOff && len(h.ReadWrite) == 0 && len(h.Read) == 0 {
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
