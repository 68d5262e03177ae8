// Package setup says which of a server's first-run steps are done — (1) a container engine,
// (2) the standard desktop image, (3) the app's chat model, set and tested, (4) a first agent
// with its computer chosen — and what to do about each that is not. It also starts preparing
// the standard image in the background on the very first start of a data directory, so that
// it is usually ready by the time an administrator reaches step 4.
//
// The steps are read from the services that own them (the Local VM manager, the model
// settings, the store's agents) on every call: nothing is kept here but a cached engine
// check (discovering engines takes seconds) and whether the first start's preparation was
// cancelled. Service is safe for concurrent use.
package setup

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"cubicle/backend/doctor"
	"cubicle/backend/models"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// State of one step.
type State string

// Step states.
const (
	Done    State = "done"
	Needed  State = "needed"
	Working State = "working" // the image is being prepared
	Failed  State = "failed"
)

// StandardImage is the image key the first start prepares and step 2 asks for.
const StandardImage = "standard"

// Step is one step of the first-run path.
type Step struct {
	State State `json:"state"`
	// Detail says what was found, or exactly what to do (for the engine: what to install on
	// this OS). Members' view leaves it out of the administrator's steps.
	Detail string `json:"detail"`
	// Percent is the image preparation's progress while it runs (-1 unknown).
	Percent *float64 `json:"percent,omitempty"`
	// Admin says only an administrator can complete the step.
	Admin bool `json:"admin"`
}

// Status is GET /api/app/admin/setup (and, with states only, GET /api/app/setup).
type Status struct {
	Engine Step `json:"engine"`
	Image  Step `json:"image"`
	Model  Step `json:"model"`
	Agents Step `json:"agents"`
	// Done reports whether every step is done (the first-run panel is then hidden).
	Done bool `json:"done"`
}

// VMs is the part of the local Local VM manager setup reads and drives (*vm.Manager).
type VMs interface {
	Status(ctx context.Context) (vm.Status, error)
	StartPrepare(key string) (vm.PrepareState, error)
	CancelPrepare(key string) (vm.PrepareState, error)
}

// Models reads the app's model settings with their last test (*models.Service).
type Models interface {
	Get() (models.View, error)
}

// Agents lists an account's agents (*store.Store).
type Agents interface {
	Agents(accountID string) ([]store.Agent, error)
}

// EngineCheck finds a container engine on this machine and says how to install one when
// there is none (doctor.Engine's check). It may take seconds.
type EngineCheck func(ctx context.Context) doctor.Check

// Config configures a Service. VMs, Models and Agents are required.
type Config struct {
	VMs    VMs
	Models Models
	Agents Agents
	// EngineCheck is asked only while no engine is connected; nil says only what the VM
	// manager knows.
	EngineCheck EngineCheck
	Logger      *slog.Logger
	// Now is the clock of the engine check's cache (nil: time.Now).
	Now func() time.Time
}

// engineCheckTTL is how long an engine check is reused: the panel polls while an
// administrator installs one.
const engineCheckTTL = 10 * time.Second

// Service computes the steps.
type Service struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	checked   doctor.Check // the last engine check; guarded by mu
	checkedAt time.Time    // guarded by mu
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.VMs == nil || cfg.Models == nil || cfg.Agents == nil {
		return nil, fmt.Errorf("setup: Config.VMs, Config.Models and Config.Agents are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, log: cfg.Logger}, nil
}

// Status returns every step with its detail, as an administrator (accountID) sees it. The
// agents step is the caller's own: each person's first agent, as in Member.
func (s *Service) Status(ctx context.Context, accountID string) (Status, error) {
	vs, err := s.cfg.VMs.Status(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("setup: %w", err)
	}
	st := Status{Engine: s.engine(ctx, vs.Engine), Image: image(vs), Model: s.model()}
	ags, err := s.cfg.Agents.Agents(accountID)
	if err != nil {
		return Status{}, fmt.Errorf("setup: list agents: %w", err)
	}
	st.Agents = agentsStep(ags)
	st.Done = st.done()
	return st, nil
}

// Member returns the steps as a member (accountID) sees them: the administrator's steps
// with their state only and a word that an administrator completes them, and the agents
// step for the member's own agents, with its detail.
func (s *Service) Member(ctx context.Context, accountID string) (Status, error) {
	vs, err := s.cfg.VMs.Status(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("setup: %w", err)
	}
	st := Status{Engine: Step{State: Needed}, Image: image(vs), Model: s.model()}
	if vs.Engine.Found && vs.Engine.Unreachable == "" {
		st.Engine.State = Done // no engine check for members: it is an administrator's business
	}
	ags, err := s.cfg.Agents.Agents(accountID)
	if err != nil {
		return Status{}, fmt.Errorf("setup: list agents: %w", err)
	}
	st.Agents = agentsStep(ags)
	for _, p := range []*Step{&st.Engine, &st.Image, &st.Model} {
		p.Admin, p.Percent = true, nil
		p.Detail = ""
		if p.State != Done {
			p.Detail = "an administrator completes this step"
		}
	}
	st.Done = st.done()
	return st, nil
}

func (st Status) done() bool {
	for _, p := range []Step{st.Engine, st.Image, st.Model, st.Agents} {
		if p.State != Done {
			return false
		}
	}
	return true
}

// engine is step 1: the engine the VM manager drives, or what to install.
func (s *Service) engine(ctx context.Context, e vm.EngineView) Step {
	step := Step{Admin: true}
	switch {
	case e.Found && e.Unreachable != "":
		step.State, step.Detail = Failed, fmt.Sprintf("%s %s stopped answering: %s; start it again (see `cubicle doctor`)", e.Kind, e.Version, e.Unreachable)
		return step
	case e.Found:
		mode := "rootful"
		if e.Rootless {
			mode = "rootless"
		}
		step.State, step.Detail = Done, fmt.Sprintf("%s %s found (%s)", e.Kind, e.Version, mode)
		return step
	}
	step.State = Needed
	c := s.engineCheck(ctx)
	switch {
	case c.Name == "":
		step.Detail = noEngine(e.Problem)
	case c.Status == doctor.Fail:
		step.Detail = strings.TrimSpace(fmt.Sprintf("no container engine found. Install one: %s — then restart Cubicle", c.Fix))
	default:
		// Found now, but this process started without it (installed since, or turned off).
		step.Detail = c.Detail
		if e.Problem != "" {
			step.Detail += ", but Cubicle runs without it: " + e.Problem
		}
		step.Detail += ". Choose it in Settings → Local VM if it is turned off there, then restart Cubicle"
		if c.Fix != "" {
			step.Detail += " (" + c.Fix + ")"
		}
	}
	return step
}

// engineCheck runs Config.EngineCheck, at most once per engineCheckTTL.
func (s *Service) engineCheck(ctx context.Context) doctor.Check {
	if s.cfg.EngineCheck == nil {
		return doctor.Check{}
	}
	s.mu.Lock()
	if !s.checkedAt.IsZero() && s.cfg.Now().Sub(s.checkedAt) < engineCheckTTL {
		c := s.checked
		s.mu.Unlock()
		return c
	}
	s.mu.Unlock()
	c := s.cfg.EngineCheck(ctx)
	s.mu.Lock()
	s.checked, s.checkedAt = c, s.cfg.Now()
	s.mu.Unlock()
	return c
}

// noEngine is the engine step's detail when no engine check can say more: the VM manager's
// problem, or where to look.
func noEngine(p string) string {
	if p == "" {
		return "no container engine is connected; run `cubicle doctor` to see why"
	}
	return p
}

// image is step 2: the standard image, prepared or on its way.
func image(vs vm.Status) Step {
	step := Step{Admin: true}
	if vs.Compose {
		step.State, step.Detail = Done, "this node runs fixed desktops from compose.desktops.yaml"
		return step
	}
	var std *vm.ImageView
	var other []string
	for i, iv := range vs.Images {
		if iv.Key == StandardImage {
			std = &vs.Images[i]
		} else if iv.Prepared {
			other = append(other, iv.Key)
		}
	}
	switch {
	case std != nil && std.Prepare != nil && std.Prepare.Running:
		p := std.Prepare.Percent
		step.State, step.Percent = Working, &p
		step.Detail = "preparing the standard image: " + std.Prepare.Message
	case std != nil && std.Prepared:
		step.State, step.Detail = Done, fmt.Sprintf("the standard image is ready (%s)", std.Ref)
	case len(other) > 0:
		step.State, step.Detail = Done, fmt.Sprintf("the %s image is ready", strings.Join(other, ", "))
	case !vs.Engine.Found:
		step.State, step.Detail = Needed, "needs a container engine first (step 1)"
	case std != nil && std.Prepare != nil && std.Prepare.Cancelled:
		step.State, step.Detail = Needed, "the preparation was cancelled; press Prepare to start it again"
	case std != nil && std.Prepare != nil && std.Prepare.Phase == "failed":
		step.State, step.Detail = Failed, std.Prepare.Error+" — press Prepare to try again"
	default:
		step.State, step.Detail = Needed, "not prepared yet: press Prepare (the first build takes several minutes; later starts reuse it)"
	}
	return step
}

// model is step 3: the app's model, set and tested.
func (s *Service) model() Step {
	step := Step{Admin: true}
	v, err := s.cfg.Models.Get()
	switch {
	case err != nil:
		step.State, step.Detail = Failed, err.Error()
	case !v.Configured:
		step.State, step.Detail = Needed, "no model is set: choose a provider, enter its base URL, model and API key, and press Test. "+
			"Until then chats run in operator mode (/shell, /screenshot and the computer panel work without a model)"
	case v.Tested == nil:
		step.State, step.Detail = Needed, fmt.Sprintf("%s at %s is set but not tested: press Test", v.Model, v.BaseURL)
	case v.Tested.OK:
		step.State, step.Detail = Done, fmt.Sprintf("%s at %s answered its test", v.Model, v.BaseURL)
	default:
		step.State, step.Detail = Failed, fmt.Sprintf("the test of %s at %s failed (%s): %s", v.Model, v.BaseURL, v.Tested.Code, v.Tested.Problem)
	}
	return step
}

// agentsStep is step 4: an agent with its computer chosen.
func agentsStep(ags []store.Agent) Step {
	for _, a := range ags {
		if a.Computer != "" && a.Computer != "none" {
			return Step{State: Done, Detail: fmt.Sprintf("%s works on its %s computer", a.Name, a.Computer)}
		}
	}
	if len(ags) > 0 {
		return Step{State: Needed, Detail: fmt.Sprintf("%s has no computer: open it and choose one in its computer panel", ags[0].Name)}
	}
	return Step{State: Needed, Detail: "no agent yet: create one and choose its computer"}
}

// CancelImage cancels the standard image's running preparation (the first start's, or one
// an administrator started). What it started is removed; prepare again from step 2.
func (s *Service) CancelImage() (vm.PrepareState, error) {
	st, err := s.cfg.VMs.CancelPrepare(StandardImage)
	if err != nil {
		return vm.PrepareState{}, err
	}
	s.log.Info("image preparation cancelled", "key", StandardImage)
	return st, nil
}

// PrepareFirstStart starts preparing the standard image in the background when the engine
// is there and no image is prepared or being prepared (the caller calls it on the very first
// start of a data directory only). It reports whether it started one; a preparation that
// cannot start is logged, never fatal: step 2 then says why.
func (s *Service) PrepareFirstStart(ctx context.Context) bool {
	vs, err := s.cfg.VMs.Status(ctx)
	if err != nil {
		s.log.Warn("first start: read the Local VM status", "err", err)
		return false
	}
	if !vs.Engine.Found || vs.Compose || vs.Preparing {
		return false
	}
	for _, iv := range vs.Images {
		if iv.Prepared {
			return false
		}
	}
	if _, err := s.cfg.VMs.StartPrepare(StandardImage); err != nil {
		s.log.Warn("first start: could not start preparing the standard image", "err", err)
		return false
	}
	s.log.Info("first start: preparing the standard image in the background (Settings → Getting started shows it; cancel it there)")
	return true
}
