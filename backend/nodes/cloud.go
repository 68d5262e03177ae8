package nodes

import (
	"cmp"
	"slices"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// SetCloud marks runner id as a cloud node (or not): agents whose computer type is "cloud"
// get their desktop on a cloud node (PATCH /api/app/admin/runners/:id {cloud}).
func (h *Hub) SetCloud(id string, cloud bool) (store.Runner, error) {
	if id == LocalID {
		return store.Runner{}, fault.Invalid("the local node is this server's own machine, not a cloud node; mark a runner instead")
	}
	r, err := h.cfg.Store.UpdateRunner(id, func(r *store.Runner) error {
		if r.Revoked {
			return fault.Conflict("runner %s (%s) was revoked: add it again to use that machine", r.Name, r.ID)
		}
		r.Cloud = cloud
		return nil
	})
	if err != nil {
		return r, err
	}
	h.log.Info("runner cloud flag changed", "node", id, "cloud", cloud)
	return r, nil
}

// CloudNodes returns the connected, unrevoked cloud runners, by name then id.
func (h *Hub) CloudNodes() ([]store.Runner, error) {
	rs, err := h.cfg.Store.Runners()
	if err != nil {
		return nil, err
	}
	out := rs[:0]
	for _, r := range rs {
		if r.Cloud && !r.Revoked && h.Connected(r.ID) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.Runner) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}
