package nodes

import (
	"context"
	"fmt"
	"slices"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/release"
	"cubicle/backend/store"
	"cubicle/runner/wire"
)

// Channels returns the runners' update channels: as an administrator saved them, else the
// defaults (release: the server's own version to every runner; canary: to none).
func (h *Hub) Channels() (release.Channels, error) {
	saved, ok, err := h.cfg.Store.RunnerChannels()
	if err != nil {
		return release.Channels{}, err
	}
	if !ok {
		return release.Defaults(h.cfg.Version), nil
	}
	return release.Channels{
		Release: release.Channel(saved.Release),
		Canary:  release.Channel(saved.Canary),
	}, nil
}

// SetChannels saves the update channels after checking them (each version must be one the
// server offers); a refused value changes nothing.
func (h *Hub) SetChannels(c release.Channels, by string) (release.Channels, error) {
	var offers func(string) bool
	if h.cfg.Dist != nil {
		offers = h.cfg.Dist.Offers
	}
	if err := c.Validate(offers); err != nil {
		return release.Channels{}, err
	}
	if err := h.cfg.Store.PutRunnerChannels(store.RunnerChannels{Release: store.RunnerChannel(c.Release),
		Canary: store.RunnerChannel(c.Canary), UpdatedBy: by}); err != nil {
		return release.Channels{}, err
	}
	h.log.Info("runner channels changed", "release", c.Release, "canary", c.Canary, "by", by)
	return c, nil
}

// SetChannel puts runner id in an update channel ("release" or "canary").
func (h *Hub) SetChannel(id, channel string) (string, error) {
	ch, err := release.ValidChannel(channel)
	if err != nil {
		return "", err
	}
	if id == LocalID {
		return "", fault.Invalid("the local node runs the server's own binary: it has no update channel")
	}
	if _, err := h.cfg.Store.UpdateRunner(id, func(r *store.Runner) error {
		if r.Revoked {
			return fault.Conflict("runner %s (%s) was revoked", r.Name, r.ID)
		}
		r.Channel = ch
		return nil
	}); err != nil {
		return "", err
	}
	h.log.Info("runner channel changed", "node", id, "channel", ch)
	return ch, nil
}

// plan is what the update channels mean for one runner.
type plan struct {
	channel   string
	target    string // "" = no rollout includes it
	available bool   // the server offers target for its platform and it runs another version
	problem   string
	bin       release.Binary
}

// plan works out r's target version from its channel and its last hello.
func (h *Hub) plan(r store.Runner, hello wire.Hello) plan {
	p := plan{channel: release.ChannelRelease}
	if r.Channel != "" {
		p.channel = r.Channel
	}
	chs, err := h.Channels()
	if err != nil {
		p.problem = err.Error()
		return p
	}
	p.target = chs.Target(r.ID, p.channel)
	if p.target == "" || hello.Version == "" || hello.Version == p.target {
		return p
	}
	if !slices.Contains(hello.Capabilities, wire.CapSelfUpdate) {
		p.problem = fmt.Sprintf("version %s cannot update itself: install %s on that machine by hand", hello.Version, p.target)
		return p
	}
	if h.cfg.Dist == nil {
		p.problem = "this server offers no runner binaries"
		return p
	}
	b, err := h.cfg.Dist.Find(hello.OS, hello.Arch, p.target)
	if err != nil {
		p.problem = err.Error()
		return p
	}
	p.available, p.bin = true, b
	if hello.UpdateError != "" {
		p.problem = "the runner's last automatic " + hello.UpdateError + "; it keeps " + hello.Version
	}
	return p
}

// Update asks runner id to switch to its channel's version now (an administrator's Update):
// the runner downloads the binary over its token, verifies its SHA-256, replaces its
// executable and restarts. The answer comes once the runner has verified the binary; a
// runner that cannot (a bad download) keeps running and the error says why.
func (h *Hub) Update(ctx context.Context, id string) (wire.UpdateResult, error) {
	rec, err := h.Known(id)
	if err != nil {
		return wire.UpdateResult{}, err
	}
	if id == LocalID {
		return wire.UpdateResult{}, fault.Invalid("the local node runs the server's own binary: update the server instead")
	}
	c := h.conn(id)
	if c == nil {
		return wire.UpdateResult{}, fault.Conflict("runner %s (%s) is not connected: it updates when it is (start it with --auto-update, or press Update then)", rec.Name, id)
	}
	if err := wire.SelfUpdate.Refuse(c.hello.Capabilities, rec.Name, id, c.hello.Version, h.cfg.Version); err != nil {
		return wire.UpdateResult{}, err
	}
	p := h.plan(rec, c.hello)
	if !p.available {
		why := p.problem
		if why == "" {
			why = fmt.Sprintf("it runs %s, which is what its channel %s wants", c.hello.Version, p.channel)
			if p.target == "" {
				why = fmt.Sprintf("no rollout of its channel %s includes it", p.channel)
			}
		}
		return wire.UpdateResult{}, fault.Conflict("runner %s (%s) has no update: %s", rec.Name, id, why)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	res, err := call(ctx, &Remote{h: h, id: id}, wire.SelfUpdate, wire.Update{Version: p.bin.Version, SHA256: p.bin.SHA256, Size: p.bin.Size})
	if err != nil {
		h.log.Warn("runner update failed", "node", id, "version", p.bin.Version, "err", err)
		return res, fmt.Errorf("runner %s (%s) kept version %s: %w", rec.Name, id, c.hello.Version, err)
	}
	h.log.Info("runner updating", "node", id, "from", res.From, "to", res.Version)
	return res, nil
}

// Require refuses (fault.ErrConflict) a node setting that needs capability when runner node is
// connected and does not advertise it: an older runner must be updated first. setting names
// the setting for the message. The local node and disconnected runners pass (a call to a
// disconnected runner fails on its own).
func (h *Hub) Require(node, capability, setting string) error {
	if node == "" || node == LocalID {
		return nil
	}
	c := h.conn(node)
	if c == nil || slices.Contains(c.hello.Capabilities, capability) {
		return nil
	}
	v := c.hello.Version
	if v == "" {
		v = "(unknown)"
	}
	return fault.Conflict("runner %s (%s) runs version %s without %s: update it (Settings → Runners → Update) before this setting (%s) can be changed",
		c.name, node, v, capability, setting)
}
