package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/engine"
	"cubicle/backend/engine/kubernetes"
	"cubicle/backend/engineconn"
	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// Which engine the local node's desktops run on: the admin's choice in Settings → Local VM
// (store.NodeSettings.Engine), overridden field by field by the process's flags
// (Config.Engine, Config.Kubernetes) and its environment (CUBICLE_ENGINE, CUBICLE_KUBE*).
// The choice is read when the backend starts: a change in Settings applies at the next
// start (the response says so), since desktops cannot move between engines while they run.

// engineChoice returns the effective engine settings and the overrides that made them.
func (b *Backend) engineChoice() (effective, saved store.EngineSettings, overrides []string, err error) {
	ns, err := b.Store.NodeSettings("local")
	if err != nil {
		return store.EngineSettings{}, store.EngineSettings{}, nil, err
	}
	saved = ns.Engine
	flags := b.cfg.Kubernetes
	flags.Kind = b.cfg.Engine
	env := engineconn.KubeEnv(os.Getenv)
	for _, o := range []struct {
		name string
		s    store.EngineSettings
	}{{"flags", flags}, {"environment (CUBICLE_ENGINE, CUBICLE_KUBE*)", env}} {
		if o.s != (store.EngineSettings{}) {
			overrides = append(overrides, o.name)
		}
	}
	effective = engineconn.OverlayEngine(engineconn.OverlayEngine(saved, env), flags)
	return effective, saved, overrides, nil
}

// EngineStatus reports the engine in force, the saved choice and whether a restart is
// needed to apply it.
func (b *Backend) EngineStatus() (api.EngineStatus, error) {
	eff, saved, over, err := b.engineChoice()
	if err != nil {
		return api.EngineStatus{}, err
	}
	b.engMu.Lock()
	eng, problem := b.engine, b.engineProblem
	b.engMu.Unlock()
	st := api.EngineStatus{Settings: eff, Saved: saved, Overrides: over, Problem: problem, Connecting: problem == vm.ErrConnecting}
	if eng != nil {
		st.Active, st.Endpoint, st.ImagesProblem = string(eng.Endpoint.Kind), eng.Endpoint.Socket, eng.ImagesProblem
	}
	st.RestartNeeded = eff != b.engineInUse
	return st, nil
}

// SetEngine saves the node's engine choice after checking it (for kubernetes: the settings
// and a connection to the cluster, so that a typo never takes effect at the next start).
// requestID makes a repeated request a no-op. It applies at the next start.
func (b *Backend) SetEngine(ctx context.Context, requestID string, s store.EngineSettings) (api.EngineStatus, error) {
	if requestID == "" {
		return api.EngineStatus{}, fault.Invalid("send a requestId with the engine change")
	}
	s.Kind = strings.ToLower(strings.TrimSpace(s.Kind))
	if err := engineconn.CheckEngineSettings(s); err != nil {
		return api.EngineStatus{}, err
	}
	if ns, err := b.Store.NodeSettings("local"); err == nil && ns.EngineRequestID == requestID {
		return b.EngineStatus()
	}
	if engine.Kind(s.Kind) == engine.Kubernetes {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		kc, err := kubernetes.Connect(cctx, engineconn.KubeOptions(s, b.log))
		cancel()
		if err != nil {
			return api.EngineStatus{}, fmt.Errorf("the cluster was not saved as this node's engine: %w", err)
		}
		kc.Close()
	} else {
		s = store.EngineSettings{Kind: s.Kind}
	}
	if _, err := b.Store.UpdateNodeSettings("local", func(ns *store.NodeSettings) error {
		ns.Engine, ns.EngineRequestID = s, requestID
		return nil
	}); err != nil {
		return api.EngineStatus{}, err
	}
	b.log.Info("engine choice saved; it applies at the next start", "kind", s.Kind, "namespace", s.Namespace)
	return b.EngineStatus()
}

// errNoEngine is the problem when the effective kind is "none".
var errNoEngine = errors.New(`Local VM is turned off (engine "none")`)
