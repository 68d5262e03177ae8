package app

import (
	"context"
	"runtime"

	"cubicle/backend/cli"
)

// programName is the name the window gives the window manager (its WM_CLASS); the Linux
// desktop entry build/linux/cubicle.desktop names it in StartupWMClass.
const programName = "cubicle"

// Shell returns the desktop shell for main.go to hand to cli.Main. Run blocks until the
// window closes or its context ends, and must be called on the main goroutine: GTK and
// Cocoa run their loop on the thread that initialised them. In a binary built without the
// desktop build tag, Run fails with the unavailable class and points to `cubicle serve`.
func Shell() cli.DesktopShell {
	return cli.DesktopShell{
		Run: func(ctx context.Context, d cli.Desktop) error {
			return run(ctx, d)
		},
		Origins:   origins(runtime.GOOS),
		Available: built,
	}
}

// origins returns the origin of the window's page on goos: the backend serves the API to
// that page cross-origin, so it allows exactly these for CORS and its Origin checks.
// Wails v2 loads the page from its own asset server at wails://wails/ with WebKit (Linux,
// macOS) and at http://wails.localhost/ with WebView2 (Windows).
func origins(goos string) []string {
	if goos == "windows" {
		return []string{"http://wails.localhost"}
	}
	return []string{"wails://wails"}
}

// navigationWatchJS reports the page's route to App.Navigated now and on every route change
// (the UI routes by location.hash). The shell injects it after each page load, so the route
// is observed without the page's cooperation; running it twice installs one listener.
const navigationWatchJS = `(function(){if(window.__cubicleNavigationWatch){return}` +
	`window.__cubicleNavigationWatch=true;` +
	`var report=function(){try{Promise.resolve(window.go.app.App.Navigated(String(location.hash))).catch(function(){})}catch(e){}};` +
	`window.addEventListener('hashchange',report);report()})()`
