package engine

import (
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"cubicle/backend/fault"
)

// Container event actions, as both engines name them after normalisation (Podman's "died" is
// ActionDie; Docker's "destroy" is ActionRemove). Adapters pass other actions ("exec",
// "attach", "health_status", …) through unchanged.
const (
	ActionCreate  = "create"
	ActionInit    = "init"
	ActionStart   = "start"
	ActionRestart = "restart"
	ActionKill    = "kill"
	ActionDie     = "die"
	ActionStop    = "stop"
	ActionCleanup = "cleanup"
	ActionPause   = "pause"
	ActionUnpause = "unpause"
	ActionRemove  = "remove"
	ActionOOM     = "oom"
)

// StateChanging reports whether a container event can change what a container is (created,
// running, paused, stopped, gone); execs, attaches and health checks cannot.
func StateChanging(action string) bool {
	switch action {
	case ActionCreate, ActionInit, ActionStart, ActionRestart, ActionKill, ActionDie, ActionStop, ActionCleanup,
		ActionPause, ActionUnpause, ActionRemove, ActionOOM:
		return true
	}
	return false
}

// Event is something that happened to a container, as the engine's event stream reports it.
type Event struct {
	Action      string            // normalised (see the Action constants)
	ContainerID string            // full id
	Name        string            // the container's name
	Labels      map[string]string // the container's labels (both engines send them with each event)
	Time        time.Time
}

// EventStream is a subscription to an engine's container events, opened by an adapter's
// Events method. Next blocks for the next event; Close ends the subscription and unblocks
// Next. It is safe to call Close from another goroutine than Next's.
type EventStream struct {
	body   io.ReadCloser
	dec    *json.Decoder
	labels map[string]string
	// next and stop feed a stream made by NewEventSource instead of body.
	next func() (Event, error)
	stop func()

	closeOnce sync.Once
	closed    chan struct{}
}

// NewEventStream reads the engine's JSON event stream (the /events answer of Podman's libpod
// API and of the Docker API share one shape) from body, keeping only container events whose
// labels satisfy labels (see MatchLabels; nil keeps all). Adapters call it.
func NewEventStream(body io.ReadCloser, labels map[string]string) *EventStream {
	return &EventStream{body: body, dec: json.NewDecoder(body), labels: labels, closed: make(chan struct{})}
}

// NewEventSource returns an EventStream fed by next, for engines without a Docker-style
// /events stream (Kubernetes: watches of Pods). next blocks for the next event and returns
// an error when the source ended (the fault.ErrUnavailable class when the engine went away);
// stop is called once by Close and must make a blocked next return. Events whose labels do
// not satisfy labels (see MatchLabels; nil keeps all) are skipped.
func NewEventSource(next func() (Event, error), stop func(), labels map[string]string) *EventStream {
	return &EventStream{next: next, stop: stop, labels: labels, closed: make(chan struct{})}
}

// wireEvent is one line of an engine's event stream.
type wireEvent struct {
	Status string `json:"status"`
	ID     string `json:"id"`
	Type   string `json:"Type"`
	Action string `json:"Action"`
	Actor  struct {
		ID         string            `json:"ID"`
		Attributes map[string]string `json:"Attributes"`
	} `json:"Actor"`
	Time     int64 `json:"time"`
	TimeNano int64 `json:"timeNano"`
}

// Attributes engines put next to a container's labels in its events.
var eventAttributes = map[string]bool{"name": true, "image": true, "containerExitCode": true, "exitCode": true,
	"podId": true, "signal": true, "execID": true, "health_status": true}

// Next returns the next container event. When the stream ends it returns an error: the
// fault.ErrUnavailable class when the engine closed it or the connection broke, and
// ErrEventStreamClosed after Close.
func (s *EventStream) Next() (Event, error) {
	if s.next != nil {
		return s.nextFromSource()
	}
	for {
		var w wireEvent
		if err := s.dec.Decode(&w); err != nil {
			select {
			case <-s.closed:
				return Event{}, ErrEventStreamClosed
			default:
			}
			if errors.Is(err, io.EOF) {
				return Event{}, fault.Unavailable("the engine ended its event stream")
			}
			return Event{}, fault.Unavailable("the engine's event stream broke: %v", err)
		}
		if w.Type != "" && w.Type != "container" {
			continue
		}
		ev := Event{Action: normaliseAction(firstOf(w.Action, w.Status)), ContainerID: firstOf(w.Actor.ID, w.ID),
			Name: w.Actor.Attributes["name"], Labels: map[string]string{}}
		for k, v := range w.Actor.Attributes {
			if !eventAttributes[k] {
				ev.Labels[k] = v
			}
		}
		switch {
		case w.TimeNano > 0:
			ev.Time = time.Unix(0, w.TimeNano)
		case w.Time > 0:
			ev.Time = time.Unix(w.Time, 0)
		}
		if ev.ContainerID == "" || !MatchLabels(ev.Labels, s.labels) {
			continue
		}
		return ev, nil
	}
}

// nextFromSource is Next of a stream made by NewEventSource.
func (s *EventStream) nextFromSource() (Event, error) {
	for {
		ev, err := s.next()
		select {
		case <-s.closed:
			return Event{}, ErrEventStreamClosed
		default:
		}
		if err != nil {
			return Event{}, err
		}
		if MatchLabels(ev.Labels, s.labels) {
			return ev, nil
		}
	}
}

// Close ends the subscription. It is idempotent.
func (s *EventStream) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		if s.stop != nil {
			s.stop()
		}
		if s.body != nil {
			s.body.Close()
		}
	})
	return nil
}

// ErrEventStreamClosed is what Next returns after Close.
var ErrEventStreamClosed = errors.New("event stream closed")

// normaliseAction maps both engines' words for the same thing to one. Docker's actions may
// carry a suffix ("exec_start: sh -c …", "health_status: healthy"): only the verb is kept.
func normaliseAction(a string) string {
	for i := 0; i < len(a); i++ {
		if a[i] == ':' || a[i] == ' ' {
			a = a[:i]
			break
		}
	}
	switch a {
	case "died":
		return ActionDie
	case "destroy":
		return ActionRemove
	}
	return a
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// EventFilters renders the /events "filters" query parameter: container events only, and
// the label selector (engines AND label filters; NewEventStream re-checks them anyway).
func EventFilters(labels map[string]string) string {
	f := map[string][]string{"type": {"container"}}
	if l := LabelFilters(labels); len(l) > 0 {
		f["label"] = l
	}
	b, _ := json.Marshal(f)
	return string(b)
}
