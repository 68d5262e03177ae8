package runner

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"time"

	"cubicle/backend/fault"
	"cubicle/backend/vm"
	"cubicle/runner/wire"
)

// ManagedServer is the URL the managed local runner dials: never resolved (Dial connects it
// in memory), ".invalid" so it can reach nothing else.
const ManagedServer = "http://local-runner.invalid"

// ManagedConfig configures the managed local runner: the server's own node served by the
// server's process. VMs, Token and Dial are required.
type ManagedConfig struct {
	// VMs is the server's own desktops' manager (node "local"), with its store: the node's
	// settings, image and instance records stay where they are. The server starts and closes it.
	VMs   *vm.Manager
	Token string // "<node id>.<secret>", from the server's registry
	// Dial connects to the server's accept path (an in-memory connection to nodes.Hub).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Engine is the engine kind the hello reports ("" when there is none; EngineError why).
	Engine, EngineError string
	Capabilities        []string
	Version             string
	Logger              *slog.Logger
}

// NewManaged returns the managed local runner. Run it (it does not start the manager, which
// the server started); cancelling Run's context stops it.
func NewManaged(cfg ManagedConfig) (*Runner, error) {
	if cfg.VMs == nil || cfg.Dial == nil || cfg.Token == "" {
		return nil, fault.Invalid("managed runner: the desktops' manager, a token and a dial are required")
	}
	node, err := NodeIDOf(cfg.Token)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Runner{
		cfg: Config{Server: ManagedServer, Token: cfg.Token, Name: "this computer", Version: cfg.Version, Logger: cfg.Logger,
			MaxBackoff: 2 * time.Second, Dial: cfg.Dial},
		log: cfg.Logger, nodeID: node, vms: cfg.VMs, busy: map[string]bool{}, managed: true, restart: make(chan struct{}),
		hello: wire.Hello{Protocol: wire.Protocol, Version: cfg.Version, OS: runtime.GOOS, Arch: runtime.GOARCH,
			Name: "this computer", Engine: cfg.Engine, EngineError: cfg.EngineError,
			Capabilities: append([]string{wire.CapIdlePolicy, wire.CapGuestRelay, wire.CapNodeSettings, wire.CapStats, wire.CapPause},
				cfg.Capabilities...)},
	}
	return r, nil
}
