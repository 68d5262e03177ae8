package app

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWailsProject checks wails.json against what the rest of the build assumes.
func TestWailsProject(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "wails.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("wails.json: %v", err)
	}
	tests := []struct{ key, want string }{
		{"name", "cubicle"},
		{"outputfilename", "cubicle"},
		{"frontend:dir", "frontend"},
		{"frontend:build", "npm run build"},
		{"build:dir", "build"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got, _ := p[tt.key].(string); got != tt.want {
				t.Errorf("wails.json %q = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join("..", "frontend", "package.json")); err != nil {
		t.Errorf("frontend:dir has no package.json: %v", err)
	}
}

// TestDesktopEntry checks the Linux desktop entry's required keys and that it names this
// program: the executable of wails.json and the window class the app sets.
func TestDesktopEntry(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "build", "linux", "cubicle.desktop"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entry := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case n == 1 && line != "[Desktop Entry]":
			t.Fatalf("first line %q, want [Desktop Entry]", line)
		case n == 1:
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("line %d %q is not key=value", n, line)
			}
			if _, dup := entry[k]; dup {
				t.Errorf("key %s repeated", k)
			}
			entry[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ key, want string }{
		{"Type", "Application"},
		{"Name", "Cubicle"},
		{"Exec", "cubicle"},
		{"Icon", "cubicle"},
		{"Terminal", "false"},
		{"StartupWMClass", programName},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := entry[tt.key]; got != tt.want {
				t.Errorf("%s = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
	if c := entry["Categories"]; !strings.HasSuffix(c, ";") {
		t.Errorf("Categories %q must end with ';'", c)
	}
}
