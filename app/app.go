// Package app is Cubicle's desktop shell: the Wails window, its bound methods and its
// application menu. It is the only package that imports Wails (a test checks this), and it
// is an adapter only: the backend serves the UI's API over loopback HTTP exactly as in
// `cubicle serve`, and the page learns where through the Connection binding. Bindings exist
// only for what a desktop alone can do (readiness, navigation from the menu, the version).
//
// Contract with the page (frontend):
//
//   - window.go.app.App.Connection() resolves to {url, token}: the backend's base URL on
//     loopback and the bearer token of the local admin for this launch.
//   - window.go.app.App.Ready() is called once the first screen has rendered.
//   - window.go.app.App.Navigated(route) is called on every route change with location.hash;
//     the shell injects the script that does it after each page load, the page need not.
//   - The Wails event "navigate" (window.runtime.EventsOn) carries a route such as
//     "#/settings/local-vm" that the page must show; the application menu emits it.
//
// Wails' runtime.* functions call log.Fatalf when given any context but the one passed to
// OnStartup, so App keeps that lifecycle context and the package passes runtime.* no other.
package app

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"cubicle/backend/cli"
	"cubicle/backend/fault"
)

// Connection tells the page where the backend listens and how to authenticate to it.
type Connection struct {
	// URL is the backend's base URL on loopback, e.g. "http://127.0.0.1:43121".
	URL string `json:"url"`
	// Token is the bearer token of the local admin, valid for this launch only.
	Token string `json:"token"`
}

// App is the struct bound into the window; the page reaches its exported methods as
// window.go.app.App.*. Every method is thin: it converts and logs, it holds no business rule.
// Methods are safe for concurrent use (Wails calls them from its own goroutines).
type App struct {
	desktop cli.Desktop
	log     *slog.Logger

	mu sync.Mutex
	// wailsCtx is the Wails lifecycle context from OnStartup; nil before startup. Guarded by mu.
	wailsCtx context.Context
	// quitPending records a quit asked for before startup. Guarded by mu.
	quitPending bool
}

// newApp returns the bound App for one launch described by d.
func newApp(d cli.Desktop) *App {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &App{desktop: d, log: log}
}

// Connection returns the backend's URL and this launch's token. It fails with the
// unavailable class when the backend handed the shell no URL (a wiring bug).
func (a *App) Connection() (Connection, error) {
	if a.desktop.URL == "" {
		return Connection{}, fault.Unavailable("desktop connection: the backend has no address for this window; restart Cubicle")
	}
	return Connection{URL: a.desktop.URL, Token: a.desktop.Token}, nil
}

// Ready is called by the page once its first screen has rendered.
func (a *App) Ready() {
	a.log.Info("desktop ui ready")
}

// Navigated is called on every route change of the page, with the route (location.hash),
// by the script the shell injects (navigationWatchJS).
func (a *App) Navigated(route string) {
	const maxRoute = 256 // the route comes from the page; keep the log line bounded
	if len(route) > maxRoute {
		route = strings.ToValidUTF8(route[:maxRoute], "")
	}
	a.log.Info("desktop navigated", "route", route)
}

// Version returns the version of this Cubicle build.
func (a *App) Version() string {
	return a.desktop.Version
}

// startup keeps Wails' lifecycle context (OnStartup) and reports whether a quit was asked
// for before it arrived, in which case the caller quits the app.
func (a *App) startup(ctx context.Context) (quit bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wailsCtx = ctx
	return a.quitPending
}

// lifecycle returns Wails' lifecycle context, or nil before startup.
func (a *App) lifecycle() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wailsCtx
}

// requestQuit returns the lifecycle context to quit with, or nil when startup has not
// happened yet; then startup reports the pending quit.
func (a *App) requestQuit() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wailsCtx == nil {
		a.quitPending = true
	}
	return a.wailsCtx
}
