package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"

	"cubicle/backend/cli"
	"cubicle/backend/fault"
)

// recorder is a slog.Handler that keeps the records it handles.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// only returns the single record logged, failing the test otherwise.
func (r *recorder) only(t *testing.T) (msg string, level slog.Level, attrs map[string]string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recs) != 1 {
		t.Fatalf("logged %d records, want 1", len(r.recs))
	}
	attrs = map[string]string{}
	r.recs[0].Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	return r.recs[0].Message, r.recs[0].Level, attrs
}

func TestConnection(t *testing.T) {
	tests := []struct {
		name    string
		desktop cli.Desktop
		want    string // JSON the page receives
		wantErr error
	}{
		{
			name:    "url and token",
			desktop: cli.Desktop{URL: "http://127.0.0.1:43121", Token: "t0k"},
			want:    `{"url":"http://127.0.0.1:43121","token":"t0k"}`,
		},
		{
			name:    "no backend address",
			desktop: cli.Desktop{Token: "t0k"},
			wantErr: fault.ErrUnavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := newApp(tt.desktop).Connection()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("page receives %s, want %s", b, tt.want)
			}
		})
	}
}

func TestLoggedSignals(t *testing.T) {
	long := "#/" + strings.Repeat("x", 300)
	tests := []struct {
		name      string
		call      func(a *App)
		wantMsg   string
		wantRoute string // "" when the record has no route
	}{
		{"ready", func(a *App) { a.Ready() }, "desktop ui ready", ""},
		{"navigated", func(a *App) { a.Navigated(routeLocalVMSettings) }, "desktop navigated", routeLocalVMSettings},
		{"navigated with a long route", func(a *App) { a.Navigated(long) }, "desktop navigated", long[:256]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			tt.call(newApp(cli.Desktop{Logger: slog.New(rec)}))
			msg, level, attrs := rec.only(t)
			if msg != tt.wantMsg || level != slog.LevelInfo {
				t.Errorf("logged %v %q, want INFO %q", level, msg, tt.wantMsg)
			}
			if attrs["route"] != tt.wantRoute {
				t.Errorf("route = %q, want %q", attrs["route"], tt.wantRoute)
			}
		})
	}
}

func TestNoLoggerDiscards(t *testing.T) {
	a := newApp(cli.Desktop{Version: "1.2.3"})
	a.Ready() // must not panic without a logger
	if got := a.Version(); got != "1.2.3" {
		t.Errorf("Version() = %q", got)
	}
}

func TestQuitBeforeAndAfterStartup(t *testing.T) {
	type ctxKey struct{}
	wctx := context.WithValue(context.Background(), ctxKey{}, "wails")

	t.Run("quit asked before startup", func(t *testing.T) {
		a := newApp(cli.Desktop{})
		if got := a.requestQuit(); got != nil {
			t.Fatalf("requestQuit before startup returned a context")
		}
		if !a.startup(wctx) {
			t.Error("startup did not report the pending quit")
		}
	})
	t.Run("quit asked after startup", func(t *testing.T) {
		a := newApp(cli.Desktop{})
		if a.startup(wctx) {
			t.Error("startup reported a quit nobody asked for")
		}
		if got := a.requestQuit(); got != wctx {
			t.Errorf("requestQuit returned %v, want the lifecycle context", got)
		}
		if got := a.lifecycle(); got != wctx {
			t.Errorf("lifecycle returned %v, want the lifecycle context", got)
		}
	})
}

func TestOrigins(t *testing.T) {
	tests := []struct {
		goos string
		want string
	}{
		{"linux", "wails://wails"},
		{"darwin", "wails://wails"},
		{"windows", "http://wails.localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.goos, func(t *testing.T) {
			got := origins(tt.goos)
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("origins(%q) = %q, want [%q]", tt.goos, got, tt.want)
			}
		})
	}
	s := Shell()
	if s.Run == nil {
		t.Error("Shell().Run is nil")
	}
	if got, want := strings.Join(s.Origins, ","), strings.Join(origins(runtime.GOOS), ","); got != want {
		t.Errorf("Shell().Origins = %q, want %q", got, want)
	}
}
