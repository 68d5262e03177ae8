package kubernetes

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

// Events subscribes to the containers whose labels satisfy the selector: it lists their
// records and Pods, then watches both from there, so nothing between the list and the
// watch is lost. Records turn into create and remove events; Pods into start (the container
// runs), kill (the Pod is being deleted), die (the container ended or the Pod is gone). When
// the API server ends a watch or goes away, Next returns a fault.ErrUnavailable error: the
// subscriber resubscribes (and compares what it knows with ListContainers).
func (c *Client) Events(ctx context.Context, labels map[string]string) (*engine.EventStream, error) {
	sel := metav1.ListOptions{LabelSelector: joinSelector(selector(labels), labelContainer)}
	cms, err := c.cs.CoreV1().ConfigMaps(c.ns).List(ctx, sel)
	if err != nil {
		return nil, c.wrap("watch containers", err)
	}
	pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, sel)
	if err != nil {
		return nil, c.wrap("watch containers", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	opts := sel
	opts.ResourceVersion, opts.AllowWatchBookmarks = cms.ResourceVersion, true
	wcm, err := c.cs.CoreV1().ConfigMaps(c.ns).Watch(wctx, opts)
	if err != nil {
		cancel()
		return nil, c.wrap("watch containers", err)
	}
	opts.ResourceVersion = pods.ResourceVersion
	wpod, err := c.cs.CoreV1().Pods(c.ns).Watch(wctx, opts)
	if err != nil {
		wcm.Stop()
		cancel()
		return nil, c.wrap("watch containers' pods", err)
	}
	src := &eventSource{c: c, ctx: wctx, cms: wcm, pods: wpod, seen: map[string]podSeen{}}
	for i := range pods.Items {
		src.seen[pods.Items[i].Name] = seenOf(&pods.Items[i])
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wcm.Stop()
			wpod.Stop()
		})
	}
	return engine.NewEventSource(src.next, stop, labels), nil
}

// podSeen is what an event source last saw of a Pod.
type podSeen struct {
	running, terminating, ended bool
}

func seenOf(p *corev1.Pod) podSeen {
	s := podSeen{terminating: p.DeletionTimestamp != nil,
		ended: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed}
	if cs := containerStatus(p); cs != nil {
		s.running = cs.State.Running != nil
		s.ended = s.ended || cs.State.Terminated != nil
	}
	return s
}

// eventSource turns two watches into engine events. next is called from one goroutine at a
// time (EventStream.Next's); seen and pending are its own.
type eventSource struct {
	c    *Client
	ctx  context.Context
	cms  watch.Interface
	pods watch.Interface
	seen map[string]podSeen
	// pending holds events translated but not returned yet (one Pod change can be two).
	pending []engine.Event
}

func (s *eventSource) next() (engine.Event, error) {
	for len(s.pending) == 0 {
		select {
		case <-s.ctx.Done():
			return engine.Event{}, fault.Unavailable("kubernetes: the watch of the desktops ended: %v", s.ctx.Err())
		case ev, ok := <-s.cms.ResultChan():
			if !ok {
				return engine.Event{}, fault.Unavailable("kubernetes: the API server at %s ended the watch of the desktops' records", s.c.host)
			}
			if err := s.watchError(ev); err != nil {
				return engine.Event{}, err
			}
			s.configMap(ev)
		case ev, ok := <-s.pods.ResultChan():
			if !ok {
				return engine.Event{}, fault.Unavailable("kubernetes: the API server at %s ended the watch of the desktops' pods", s.c.host)
			}
			if err := s.watchError(ev); err != nil {
				return engine.Event{}, err
			}
			s.pod(ev)
		}
	}
	ev := s.pending[0]
	s.pending = s.pending[1:]
	return ev, nil
}

// watchError turns an error event (a resource version too old, the server shutting down)
// into the end of the stream.
func (s *eventSource) watchError(ev watch.Event) error {
	if ev.Type != watch.Error {
		return nil
	}
	if st, ok := ev.Object.(*metav1.Status); ok {
		return fault.Unavailable("kubernetes: the watch of the desktops ended: %s", st.Message)
	}
	return fault.Unavailable("kubernetes: the watch of the desktops ended with an error")
}

func (s *eventSource) emit(action, name string, labels, annotations map[string]string) {
	s.pending = append(s.pending, engine.Event{Action: action, ContainerID: name, Name: name,
		Labels: decodeLabels(labels, annotations), Time: time.Now()})
}

func (s *eventSource) configMap(ev watch.Event) {
	cm, ok := ev.Object.(*corev1.ConfigMap)
	if !ok {
		return
	}
	switch ev.Type {
	case watch.Added:
		s.emit(engine.ActionCreate, cm.Name, cm.Labels, cm.Annotations)
	case watch.Deleted:
		s.emit(engine.ActionRemove, cm.Name, cm.Labels, cm.Annotations)
	}
}

func (s *eventSource) pod(ev watch.Event) {
	p, ok := ev.Object.(*corev1.Pod)
	if !ok || ev.Type == watch.Bookmark {
		return
	}
	was := s.seen[p.Name]
	if ev.Type == watch.Deleted {
		delete(s.seen, p.Name)
		if !was.ended {
			s.emit(engine.ActionDie, p.Name, p.Labels, p.Annotations)
		}
		return
	}
	now := seenOf(p)
	s.seen[p.Name] = now
	if ev.Type == watch.Added {
		s.emit(engine.ActionInit, p.Name, p.Labels, p.Annotations)
	}
	if now.running && !was.running {
		s.emit(engine.ActionStart, p.Name, p.Labels, p.Annotations)
	}
	if now.terminating && !was.terminating {
		s.emit(engine.ActionKill, p.Name, p.Labels, p.Annotations)
	}
	if now.ended && !was.ended {
		s.emit(engine.ActionDie, p.Name, p.Labels, p.Annotations)
	}
}
