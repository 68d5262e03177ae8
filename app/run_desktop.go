//go:build desktop

package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"

	"github.com/wailsapp/wails/v2"
	"github.com/wailsapp/wails/v2/pkg/logger"
	"github.com/wailsapp/wails/v2/pkg/options"
	"github.com/wailsapp/wails/v2/pkg/options/assetserver"
	"github.com/wailsapp/wails/v2/pkg/options/linux"
	wailsruntime "github.com/wailsapp/wails/v2/pkg/runtime"

	"cubicle/backend/cli"
	"cubicle/backend/fault"
	"cubicle/frontend"
)

// run shows the Wails window for one launch and blocks until it closes or ctx ends.
// built reports whether this binary contains the desktop shell.
const built = true

func run(ctx context.Context, d cli.Desktop) error {
	assets, built := frontend.Assets()
	if !built {
		return fault.Unavailable("desktop app: the web UI is not built into this binary; " +
			"run `npm run build` in frontend/ (or `make build`) and build cubicle again")
	}
	a := newApp(d)

	// Ctrl-C or the backend ending cancels ctx; the window must close then too. The
	// goroutine ends when ctx ends or when Wails returns, and run waits for it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			if wctx := a.requestQuit(); wctx != nil {
				wailsruntime.Quit(wctx)
			}
		case <-stop:
		}
	}()

	err := runWails(&options.App{
		Title:     "Cubicle",
		Width:     1280,
		Height:    820,
		MinWidth:  360, // phone width: the UI is responsive down to it
		MinHeight: 480,
		AssetServer: &assetserver.Options{
			Assets: assets,
		},
		Menu: applicationMenu(runtime.GOOS, wailsActions{a}),
		OnStartup: func(wctx context.Context) {
			if a.startup(wctx) {
				wailsruntime.Quit(wctx)
			}
		},
		OnDomReady: func(wctx context.Context) {
			wailsruntime.WindowExecJS(wctx, navigationWatchJS)
		},
		Bind:               []any{a},
		Logger:             wailsLogger{a.log.With("component", "wails")},
		LogLevel:           logger.INFO,
		LogLevelProduction: logger.WARNING,
		Linux: &linux.Options{
			Icon:        iconPNG(256),
			ProgramName: programName,
			// Wails' own default when Linux options are absent: GPU compositing in
			// WebKitGTK leaves the window blank on some drivers (wails issue 2977).
			WebviewGpuPolicy: linux.WebviewGpuPolicyNever,
		},
	})
	close(stop)
	wg.Wait()
	return err
}

// runWails runs the Wails app. Wails panics instead of failing when GTK cannot open the
// display; that becomes an error that says what to check.
func runWails(opts *options.App) (err error) {
	hint := ""
	if runtime.GOOS == "linux" {
		hint = fmt.Sprintf("; check that DISPLAY=%q names a running X server", os.Getenv("DISPLAY"))
	}
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		err = fault.Unavailable("desktop app: cannot open the window: %v%s, or run `cubicle serve` and use a browser", p, hint)
	}()
	if err := wails.Run(opts); err != nil {
		return fmt.Errorf("desktop app: %w: %w%s, or run `cubicle serve` and use a browser", fault.ErrUnavailable, err, hint)
	}
	return nil
}

// wailsActions carries out the menu's actions with Wails' runtime. Menu clicks only happen
// once the window exists, after OnStartup gave App the lifecycle context.
type wailsActions struct{ a *App }

func (w wailsActions) Navigate(route string) {
	if ctx := w.a.lifecycle(); ctx != nil {
		wailsruntime.EventsEmit(ctx, eventNavigate, route)
	}
}

func (w wailsActions) Quit() {
	if ctx := w.a.lifecycle(); ctx != nil {
		wailsruntime.Quit(ctx)
	}
}

func (w wailsActions) Edit(cmd editCommand) {
	ctx := w.a.lifecycle()
	if ctx == nil {
		return
	}
	var clip string
	if cmd == editPaste {
		var err error
		if clip, err = wailsruntime.ClipboardGetText(ctx); err != nil {
			w.a.log.Warn("desktop paste: cannot read the clipboard", "err", err)
			return
		}
	}
	js, err := editScript(cmd, clip)
	if err != nil {
		w.a.log.Warn("desktop edit", "err", err)
		return
	}
	wailsruntime.WindowExecJS(ctx, js)
}

// wailsLogger sends Wails' own log lines to the injected slog logger.
type wailsLogger struct{ log *slog.Logger }

func (l wailsLogger) Print(m string)   { l.log.Info(m) }
func (l wailsLogger) Trace(m string)   { l.log.Debug(m) }
func (l wailsLogger) Debug(m string)   { l.log.Debug(m) }
func (l wailsLogger) Info(m string)    { l.log.Info(m) }
func (l wailsLogger) Warning(m string) { l.log.Warn(m) }
func (l wailsLogger) Error(m string)   { l.log.Error(m) }

// Fatal logs; Wails exits the process right after calling it.
func (l wailsLogger) Fatal(m string) { l.log.Error(m) }
