package setup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cubicle/backend/doctor"
	"cubicle/backend/fault"
	"cubicle/backend/models"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// These tests check the step logic with stand-ins for the services; the path through a real
// engine, a real preparation and a scripted model is TestSetupFirstRun in package backend.

type fakeVMs struct {
	st       vm.Status
	started  []string
	startErr error
}

func (f *fakeVMs) Status(context.Context) (vm.Status, error) { return f.st, nil }
func (f *fakeVMs) StartPrepare(key string) (vm.PrepareState, error) {
	f.started = append(f.started, key)
	return vm.PrepareState{Key: key, Running: true}, f.startErr
}
func (f *fakeVMs) CancelPrepare(key string) (vm.PrepareState, error) {
	return vm.PrepareState{}, fault.Conflict("no preparation of image %q is running", key)
}

type fakeModels struct{ v models.View }

func (f fakeModels) Get() (models.View, error) { return f.v, nil }

type fakeAgents map[string][]store.Agent

func (f fakeAgents) Agents(id string) ([]store.Agent, error) { return f[id], nil }

var found = vm.EngineView{Found: true, Kind: "podman", Version: "5.4.2"}

func TestImageStep(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     vm.Status
		want   State
		detail string
	}{
		{"no engine", vm.Status{Images: []vm.ImageView{{Key: "standard"}}}, Needed, "engine first"},
		{"not prepared", vm.Status{Engine: found, Images: []vm.ImageView{{Key: "standard"}}}, Needed, "press Prepare"},
		{"preparing", vm.Status{Engine: found, Images: []vm.ImageView{{Key: "standard", Prepare: &vm.PrepareState{Running: true, Percent: 42, Message: "building"}}}}, Working, "building"},
		{"prepared", vm.Status{Engine: found, Images: []vm.ImageView{{Key: "standard", Prepared: true, Ref: "localhost/cubicle-desktop:standard-x"}}}, Done, "standard-x"},
		{"cursor prepared", vm.Status{Engine: found, Images: []vm.ImageView{{Key: "standard"}, {Key: "cursor", Prepared: true}}}, Done, "cursor"},
		{"failed", vm.Status{Engine: found, Images: []vm.ImageView{{Key: "standard", Prepare: &vm.PrepareState{Phase: "failed", Error: "disk full"}}}}, Failed, "disk full"},
		{"cancelled", vm.Status{Engine: found, Images: []vm.ImageView{{Key: "standard", Prepare: &vm.PrepareState{Phase: "failed", Cancelled: true, Error: "x"}}}}, Needed, "cancelled"},
		{"compose", vm.Status{Engine: found, Compose: true}, Done, "compose"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := image(tc.st)
			if got.State != tc.want || !strings.Contains(got.Detail, tc.detail) {
				t.Fatalf("image() = %+v, want %s with %q", got, tc.want, tc.detail)
			}
			if (got.State == Working) != (got.Percent != nil) {
				t.Fatalf("percent %v with state %s", got.Percent, got.State)
			}
		})
	}
}

func TestModelStep(t *testing.T) {
	set := models.View{Configured: true, BaseURL: "https://api.example/v1", Model: "m1"}
	tested := func(ok bool) models.View {
		v := set
		v.Tested = &store.ModelTest{At: time.Now(), OK: ok, Code: "key", Problem: "HTTP 401"}
		return v
	}
	for _, tc := range []struct {
		name   string
		v      models.View
		want   State
		detail string
	}{
		{"none", models.View{}, Needed, "operator mode"},
		{"set, untested", set, Needed, "press Test"},
		{"tested ok", tested(true), Done, "answered"},
		{"test failed", tested(false), Failed, "HTTP 401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New(Config{VMs: &fakeVMs{}, Models: fakeModels{tc.v}, Agents: fakeAgents{}})
			got := s.model()
			if got.State != tc.want || !strings.Contains(got.Detail, tc.detail) {
				t.Fatalf("model() = %+v, want %s with %q", got, tc.want, tc.detail)
			}
		})
	}
}

func TestAgentsStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		ags  []store.Agent
		want State
	}{
		{"none", nil, Needed},
		{"no computer", []store.Agent{{Name: "A", Computer: "none"}}, Needed},
		{"with computer", []store.Agent{{Name: "A", Computer: "none"}, {Name: "B", Computer: "vm"}}, Done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentsStep(tc.ags); got.State != tc.want {
				t.Fatalf("agentsStep = %+v, want %s", got, tc.want)
			}
		})
	}
}

// The engine step says what to install when there is none, and asks the (slow) check at
// most once per engineCheckTTL.
func TestEngineStep(t *testing.T) {
	calls := 0
	now := time.Unix(1000, 0)
	s, _ := New(Config{VMs: &fakeVMs{}, Models: fakeModels{}, Agents: fakeAgents{}, Now: func() time.Time { return now },
		EngineCheck: func(context.Context) doctor.Check {
			calls++
			return doctor.Check{Name: "container engine", Status: doctor.Fail, Fix: "sudo apt-get install -y podman"}
		}})
	step := s.engine(context.Background(), vm.EngineView{Problem: "no engine"})
	if step.State != Needed || !strings.Contains(step.Detail, "sudo apt-get install -y podman") {
		t.Fatalf("engine step = %+v", step)
	}
	s.engine(context.Background(), vm.EngineView{})
	if calls != 1 {
		t.Fatalf("engine check ran %d times within its TTL, want 1", calls)
	}
	now = now.Add(engineCheckTTL + time.Second)
	s.engine(context.Background(), vm.EngineView{})
	if calls != 2 {
		t.Fatalf("engine check ran %d times after its TTL, want 2", calls)
	}
	if got := s.engine(context.Background(), found); got.State != Done || calls != 2 {
		t.Fatalf("found engine: %+v (checks %d)", got, calls)
	}
}

// Members see the administrator's steps' states without their details, and their own agents.
func TestMemberView(t *testing.T) {
	vms := &fakeVMs{st: vm.Status{Engine: found, Images: []vm.ImageView{{Key: "standard", Prepare: &vm.PrepareState{Running: true, Message: "secret build log"}}}}}
	ags := fakeAgents{"admin": {{Name: "Boss", Computer: "vm"}}, "member": nil}
	s, _ := New(Config{VMs: vms, Models: fakeModels{}, Agents: ags})
	admin, err := s.Status(context.Background(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	if admin.Agents.State != Done || admin.Image.State != Working || admin.Done {
		t.Fatalf("admin view: %+v", admin)
	}
	m, err := s.Member(context.Background(), "member")
	if err != nil {
		t.Fatal(err)
	}
	if m.Agents.State != Needed || m.Image.State != Working || m.Engine.State != Done || m.Done {
		t.Fatalf("member view: %+v", m)
	}
	for _, p := range []Step{m.Engine, m.Image, m.Model} {
		if !p.Admin || p.Percent != nil || strings.Contains(p.Detail, "secret") {
			t.Fatalf("member sees an administrator's detail: %+v", p)
		}
	}
	if m.Model.Detail != "an administrator completes this step" {
		t.Fatalf("member's model step: %+v", m.Model)
	}
}

func TestPrepareFirstStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   vm.Status
		want bool
	}{
		{"fresh", vm.Status{Engine: found, Images: []vm.ImageView{{Key: "standard"}}}, true},
		{"no engine", vm.Status{Images: []vm.ImageView{{Key: "standard"}}}, false},
		{"already prepared", vm.Status{Engine: found, Images: []vm.ImageView{{Key: "cursor", Prepared: true}}}, false},
		{"preparing", vm.Status{Engine: found, Preparing: true}, false},
		{"compose", vm.Status{Engine: found, Compose: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vms := &fakeVMs{st: tc.st}
			s, _ := New(Config{VMs: vms, Models: fakeModels{}, Agents: fakeAgents{}})
			if got := s.PrepareFirstStart(context.Background()); got != tc.want || (len(vms.started) == 1) != tc.want {
				t.Fatalf("PrepareFirstStart = %v (started %v), want %v", got, vms.started, tc.want)
			}
		})
	}
	vms := &fakeVMs{st: vm.Status{Engine: found}, startErr: errors.New("boom")}
	s, _ := New(Config{VMs: vms, Models: fakeModels{}, Agents: fakeAgents{}})
	if s.PrepareFirstStart(context.Background()) {
		t.Fatal("a preparation that failed to start was reported started")
	}
}
