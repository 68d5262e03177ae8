package recording

import (
	"context"
	"time"

	"cubicle/backend/nodeapi"
)

// Markers for desktops that another node records (a runner with its own recordings,
// docs/recording.md "Runners"): the tool calls, turns and takeovers the server sees go to
// that node over its link, in order, by one goroutine of the Service (forwarder). The queue
// never blocks the agent's turn: when it is full (the link is stuck) a marker is dropped with
// a warning.

// forwardTimeout bounds one marker's trip to its node.
const forwardTimeout = 10 * time.Second

// forwardMark queues m (made at at, begun at began) for node, which records desktop id.
func (s *Service) forwardMark(node, id string, m Marker, at time.Time, began *time.Time, img []byte) {
	rm := nodeapi.RecordingMark{DesktopID: id, Marker: m, Shot: img}
	if len(img) > 0 {
		rm.ShotType = m.ShotType
		if rm.ShotType == "" {
			rm.ShotType = "image/png"
		}
	}
	rm.Marker.ShotType = ""
	f := forwarded{node: node, mark: rm, made: at}
	if began != nil {
		f.mark.BeganAgoMs = max(at.Sub(*began).Milliseconds(), 1)
	}
	select {
	case s.forward <- f:
	default:
		s.log.Warn("a marker for a desktop recorded on a runner is dropped: its link is too slow", "node", node, "desktop", id, "label", m.Label)
	}
}

// push queues node's settings for it (Config.Push).
func (s *Service) push(node string) {
	if s.cfg.Push == nil {
		return
	}
	select {
	case s.forward <- forwarded{node: node, push: true}:
	default:
		s.log.Warn("the recording settings could not be queued for a runner", "node", node)
	}
}

// NodeSettings is what st says for node's own recordings.
func (st Settings) NodeSettings(node string) nodeapi.RecordingSettings {
	return nodeapi.RecordingSettings{Record: !st.off(node), KeepDays: st.KeepDays, MaxBytes: st.MaxBytes}
}

// forwarder is the Service's goroutine that sends the queued markers and settings.
func (s *Service) forwarder() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case f := <-s.forward:
			if f.push {
				ctx, cancel := context.WithTimeout(s.ctx, forwardTimeout)
				err := s.cfg.Push(ctx, f.node, s.Settings().NodeSettings(f.node))
				cancel()
				if err != nil && s.ctx.Err() == nil {
					s.log.Warn("the recording settings did not reach a runner that records its desktops", "node", f.node, "err", err)
				}
				continue
			}
			now := time.Now()
			// The times are sent as "how long before sending", so the clocks need not agree.
			f.mark.AgoMs = max(now.Sub(f.made).Milliseconds(), 0)
			if f.mark.BeganAgoMs > 0 {
				f.mark.BeganAgoMs += f.mark.AgoMs
			}
			ctx, cancel := context.WithTimeout(s.ctx, forwardTimeout)
			err := s.cfg.Forward(ctx, f.node, f.mark)
			cancel()
			if err != nil && s.ctx.Err() == nil {
				s.log.Warn("a marker did not reach the runner that records the desktop", "node", f.node, "desktop", f.mark.DesktopID,
					"label", f.mark.Marker.Label, "err", err)
			}
		}
	}
}
