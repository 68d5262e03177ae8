package events_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"cubicle/backend/events"
)

// next waits (time-bounded, never a fixed sleep) for the subscription's next event.
func next(t *testing.T, s *events.Subscription) events.Event {
	t.Helper()
	select {
	case e, ok := <-s.C():
		if !ok {
			t.Fatal("subscription closed")
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
	}
	return events.Event{}
}

// none checks that nothing is buffered for s: the bus delivers synchronously into the buffer
// before taking the next published event, so a marker published last and received proves
// that nothing before it is still on its way.
func none(t *testing.T, b *events.Bus, s *events.Subscription) {
	t.Helper()
	b.Publish("test.marker", events.Everyone, nil)
	for {
		e := next(t, s)
		if e.Type == "test.marker" {
			return
		}
		t.Fatalf("unexpected event %+v", e)
	}
}

// TestDeliveryWithoutPolling: a published event reaches a waiting subscriber at once — the
// wait below is bounded by a timeout, and nothing in the bus polls.
func TestDeliveryWithoutPolling(t *testing.T) {
	b := events.New(events.Config{})
	defer b.Close()
	s := b.Subscribe(events.SubscribeOptions{})
	defer s.Close()
	go b.Publish(events.DesktopState, events.ForAccount("acc1", true), events.Desktop{InstanceID: "vm-1", State: "running"})
	e := next(t, s)
	if e.Type != events.DesktopState || e.ID != 1 || e.Time.IsZero() {
		t.Fatalf("event %+v", e)
	}
	if d, ok := e.Data.(events.Desktop); !ok || d.InstanceID != "vm-1" || d.State != "running" {
		t.Fatalf("payload %#v", e.Data)
	}
	if b.LastID() != 1 {
		t.Fatalf("LastID %d", b.LastID())
	}
}

func TestOrderAndIDs(t *testing.T) {
	b := events.New(events.Config{})
	defer b.Close()
	s := b.Subscribe(events.SubscribeOptions{Buffer: 1000})
	for i := range 500 {
		b.Publish(events.TimelineEntry, events.ForAccount("a", false), i)
	}
	for i := range 500 {
		e := next(t, s)
		if e.ID != uint64(i+1) || e.Data != i {
			t.Fatalf("event %d: id %d data %v", i, e.ID, e.Data)
		}
	}
	if s.Lagged() {
		t.Fatal("lagged with room in the buffer")
	}
}

// TestAudience is the scoping table: who sees what on the UI's stream.
func TestAudience(t *testing.T) {
	member := events.Viewer{Account: "m1"}
	other := events.Viewer{Account: "m2"}
	admin := events.Viewer{Account: "adm", Admin: true}
	cases := []struct {
		name string
		aud  events.Audience
		sees map[string]bool
	}{
		{"own desktop, admins too", events.ForAccount("m1", true), map[string]bool{"member": true, "other": false, "admin": true}},
		{"own chat, not admins", events.ForAccount("m1", false), map[string]bool{"member": true, "other": false, "admin": false}},
		{"admins only", events.AdminsOnly, map[string]bool{"member": false, "other": false, "admin": true}},
		{"everyone", events.Everyone, map[string]bool{"member": true, "other": true, "admin": true}},
		{"nobody's", events.Audience{}, map[string]bool{"member": false, "other": false, "admin": false}},
		{"admin's own", events.ForAccount("adm", false), map[string]bool{"member": false, "other": false, "admin": true}},
	}
	viewers := map[string]events.Viewer{"member": member, "other": other, "admin": admin}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for who, v := range viewers {
				if got := c.aud.Sees(v); got != c.sees[who] {
					t.Errorf("%s sees %v, want %v", who, got, c.sees[who])
				}
			}
		})
	}
	// And through real subscriptions.
	b := events.New(events.Config{})
	defer b.Close()
	subs := map[string]*events.Subscription{}
	for who, v := range viewers {
		subs[who] = b.Subscribe(events.SubscribeOptions{Viewer: &v})
	}
	all := b.Subscribe(events.SubscribeOptions{})
	for i, c := range cases {
		b.Publish(events.DesktopState, c.aud, i)
	}
	b.Publish("test.marker", events.Everyone, -1)
	for who, s := range subs {
		want := []int{}
		for i, c := range cases {
			if c.sees[who] {
				want = append(want, i)
			}
		}
		got := []int{}
		for {
			e := next(t, s)
			if e.Data.(int) == -1 {
				break
			}
			got = append(got, e.Data.(int))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s received %v, want %v", who, got, want)
		}
	}
	for range cases {
		next(t, all) // the in-process subscriber (no viewer) gets every event
	}
}

func TestTypeFilter(t *testing.T) {
	b := events.New(events.Config{})
	defer b.Close()
	s := b.Subscribe(events.SubscribeOptions{Types: []events.Type{events.ControlChanged, "test.marker"}})
	if !b.WatchingFor(events.ControlChanged, events.Everyone) || b.WatchingFor(events.DesktopStats, events.Everyone) {
		t.Fatal("WatchingFor does not follow the filter")
	}
	b.Publish(events.DesktopStats, events.AdminsOnly, 1)
	b.Publish(events.ControlChanged, events.Everyone, 2)
	if e := next(t, s); e.Type != events.ControlChanged || e.ID != 2 {
		t.Fatalf("got %+v", e)
	}
	none(t, b, s)
	s.Close()
	if b.WatchingFor(events.ControlChanged, events.Everyone) {
		t.Fatal("still watching after Close")
	}
	every := b.Subscribe(events.SubscribeOptions{})
	if !b.WatchingFor(events.DesktopStats, events.AdminsOnly) {
		t.Fatal("a subscription of every type does not count")
	}
	every.Close()
	if b.WatchingFor(events.DesktopStats, events.AdminsOnly) {
		t.Fatal("still watching")
	}
}

// TestWatchingFor: only a subscription that would receive the event counts — a member's
// stream does not watch administrators' events, an administrator's or an in-process reader
// does, and a type filter is honoured; a closed subscription stops counting.
func TestWatchingFor(t *testing.T) {
	b := events.New(events.Config{})
	defer b.Close()
	if b.WatchingFor(events.DesktopStats, events.AdminsOnly) {
		t.Fatal("watching with no subscription")
	}
	member := b.Subscribe(events.SubscribeOptions{Viewer: &events.Viewer{Account: "acc-m"}})
	defer member.Close()
	if b.WatchingFor(events.DesktopStats, events.AdminsOnly) {
		t.Fatal("a member's stream counts as watching administrators' stats")
	}
	if !b.WatchingFor(events.DesktopState, events.ForAccount("acc-m", true)) || b.WatchingFor(events.DesktopState, events.ForAccount("acc-x", true)) {
		t.Fatal("WatchingFor does not follow the member's account")
	}
	if !b.WatchingFor(events.DesktopStats, events.ForAccount("acc-m", false)) {
		t.Fatal("a member's stream does not watch its own account's stats")
	}
	filtered := b.Subscribe(events.SubscribeOptions{Types: []events.Type{events.ControlChanged}})
	if b.WatchingFor(events.DesktopStats, events.AdminsOnly) || !b.WatchingFor(events.ControlChanged, events.AdminsOnly) {
		t.Fatal("an in-process reader's type filter is not honoured")
	}
	filtered.Close()
	admin := b.Subscribe(events.SubscribeOptions{Viewer: &events.Viewer{Account: "acc-a", Admin: true}})
	if !b.WatchingFor(events.DesktopStats, events.AdminsOnly) {
		t.Fatal("an administrator's stream does not count")
	}
	admin.Close()
	if b.WatchingFor(events.DesktopStats, events.AdminsOnly) {
		t.Fatal("still watching after the administrator's stream closed")
	}
}

// TestSlowSubscriberLosesEventsNotThePublisher: a subscriber that never reads loses events and
// is marked lagged; the publisher and a reading subscriber are not held up.
func TestSlowSubscriberLosesEventsNotThePublisher(t *testing.T) {
	b := events.New(events.Config{Queue: 8})
	defer b.Close()
	stuck := b.Subscribe(events.SubscribeOptions{Buffer: 4})
	reader := b.Subscribe(events.SubscribeOptions{Buffer: 16})
	const n = 5000
	got := make(chan int, 1)
	go func() {
		c := 0
		for range reader.C() { // until the subscription is closed below
			c++
		}
		got <- c
	}()
	published := make(chan struct{})
	go func() {
		for i := range n {
			b.Publish(events.TimelineEntry, events.Everyone, i)
		}
		close(published)
	}()
	select {
	case <-published:
	case <-time.After(30 * time.Second):
		t.Fatal("the publisher was held up by a subscriber that does not read")
	}
	// Every event is numbered once a later subscription (which drains the queue first) exists.
	b.Subscribe(events.SubscribeOptions{Types: []events.Type{"test.none"}}).Close()
	reader.Close()
	c := <-got
	if c == 0 {
		t.Fatal("the reading subscriber got nothing")
	}
	if c < n && !reader.Lagged() {
		t.Fatalf("reader got %d of %d events but is not marked lagged", c, n)
	}
	if !stuck.Lagged() {
		t.Fatal("the stuck subscriber is not marked lagged")
	}
	if stuck.Lagged() {
		t.Fatal("Lagged does not clear")
	}
	// Its buffer holds the first events, in order.
	for i := range 4 {
		if e := next(t, stuck); e.Data != i {
			t.Fatalf("buffered event %d is %v", i, e.Data)
		}
	}
}

func TestReplaySince(t *testing.T) {
	b := events.New(events.Config{History: 10})
	defer b.Close()
	for i := range 5 {
		b.Publish(events.AgentChanged, events.ForAccount("a", false), i)
	}
	// Make sure the five are numbered before subscribing.
	probe := b.Subscribe(events.SubscribeOptions{Since: 1})
	for range 4 {
		next(t, probe)
	}
	probe.Close()

	cases := []struct {
		name   string
		since  uint64
		want   []uint64
		lagged bool
	}{
		{"resume after 3", 3, []uint64{4, 5}, false},
		{"up to date", 5, nil, false},
		{"from an id never given", 99, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := b.Subscribe(events.SubscribeOptions{Since: c.since, Types: []events.Type{events.AgentChanged, "test.marker"}})
			defer s.Close()
			for _, id := range c.want {
				if e := next(t, s); e.ID != id {
					t.Fatalf("replayed %d, want %d", e.ID, id)
				}
			}
			if s.Lagged() != c.lagged {
				t.Fatalf("lagged %v, want %v", !c.lagged, c.lagged)
			}
		})
	}
	// Push the first events out of the 10-event history: a resume from 1 has lost some.
	for i := range 20 {
		b.Publish(events.AgentChanged, events.ForAccount("a", false), 100+i)
	}
	s := b.Subscribe(events.SubscribeOptions{Since: 1, Types: []events.Type{events.AgentChanged}})
	defer s.Close()
	first := next(t, s)
	if !s.Lagged() || first.ID <= 2 {
		t.Fatalf("resume beyond the history: first %d, lagged not reported", first.ID)
	}
	// Replay respects the viewer.
	v := events.Viewer{Account: "someone-else"}
	hidden := b.Subscribe(events.SubscribeOptions{Since: 20, Viewer: &v})
	none(t, b, hidden)
}

func TestCloseStopsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := events.New(events.Config{})
		s := b.Subscribe(events.SubscribeOptions{})
		read := make(chan int)
		go func() {
			n := 0
			for range s.C() {
				n++
			}
			read <- n
		}()
		b.Publish(events.NodeChanged, events.Everyone, events.Node{NodeID: "local"})
		synctest.Wait()
		b.Close()
		b.Close() // idempotent
		if n := <-read; n != 1 {
			t.Fatalf("read %d events before the close", n)
		}
		b.Publish(events.NodeChanged, events.Everyone, nil) // after Close: returns, does nothing
		late := b.Subscribe(events.SubscribeOptions{})
		if _, ok := <-late.C(); ok {
			t.Fatal("a subscription after Close is open")
		}
		late.Close()
		s.Close() // after the bus closed: returns
		// synctest fails the test if a goroutine of the bus is left blocked.
	})
}

func TestSubscriptionCloseWhileEventsFlow(t *testing.T) {
	b := events.New(events.Config{})
	defer b.Close()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					b.Publish(events.ControlChanged, events.Everyone, nil)
				}
			}
		}()
	}
	for range 50 {
		s := b.Subscribe(events.SubscribeOptions{Buffer: 2})
		s.Close()
		s.Close()
		for range s.C() { // drained and closed
		}
	}
	close(stop)
	wg.Wait()
}
