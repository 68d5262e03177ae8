package app

import (
	"encoding/json"
	"errors"
	"os/exec"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/wailsapp/wails/v2/pkg/menu"
	"github.com/wailsapp/wails/v2/pkg/menu/keys"

	"cubicle/backend/fault"
	"cubicle/internal/testenv"
)

// actionLog records what the menu asked the shell to do.
type actionLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *actionLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}
func (l *actionLog) Navigate(route string) { l.add("navigate " + route) }
func (l *actionLog) Quit()                 { l.add("quit") }
func (l *actionLog) Edit(cmd editCommand)  { l.add("edit " + string(cmd)) }

// find returns the item labelled label in m, or nil.
func find(m *menu.Menu, label string) *menu.MenuItem {
	for _, it := range m.Items {
		if it.Label == label {
			return it
		}
	}
	return nil
}

func TestApplicationMenu(t *testing.T) {
	for _, goos := range []string{"linux", "windows", "darwin"} {
		t.Run(goos, func(t *testing.T) {
			log := &actionLog{}
			bar := applicationMenu(goos, log)

			cubicle := find(bar, "Cubicle")
			if bar.Items[0] != cubicle || cubicle.SubMenu == nil {
				t.Fatalf("first menu is not the Cubicle submenu")
			}
			tests := []struct {
				label string
				accel *keys.Accelerator
				want  string
			}{
				{"Local VM settings…", keys.CmdOrCtrl(","), "navigate " + routeLocalVMSettings},
				{"Quit Cubicle", keys.CmdOrCtrl("q"), "quit"},
			}
			for _, tt := range tests {
				it := find(cubicle.SubMenu, tt.label)
				if it == nil {
					t.Fatalf("no %q item", tt.label)
				}
				if !reflect.DeepEqual(it.Accelerator, tt.accel) {
					t.Errorf("%q accelerator = %+v, want %+v", tt.label, it.Accelerator, tt.accel)
				}
				log.calls = nil
				it.Click(&menu.CallbackData{MenuItem: it})
				if !slices.Equal(log.calls, []string{tt.want}) {
					t.Errorf("clicking %q did %q, want %q", tt.label, log.calls, tt.want)
				}
			}

			edit := find(bar, "Edit")
			if goos == "darwin" {
				if edit == nil {
					edit = bar.Items[len(bar.Items)-1]
				}
				if edit.Role != menu.EditMenuRole {
					t.Errorf("macOS Edit menu has role %v, want the Edit role", edit.Role)
				}
				return
			}
			// Wails on Linux builds every top-level item as a submenu and has no roles.
			for _, it := range bar.Items {
				if it.SubMenu == nil || it.Role != 0 {
					t.Errorf("top-level %q: submenu %v role %v; Linux needs plain submenus", it.Label, it.SubMenu != nil, it.Role)
				}
			}
			if edit == nil {
				t.Fatal("no Edit menu")
			}
			var got []string
			for _, it := range edit.SubMenu.Items {
				if it.Type == menu.SeparatorType {
					continue
				}
				if it.Accelerator != nil {
					t.Errorf("Edit item %q has an accelerator; it would take the key from text fields", it.Label)
				}
				log.calls = nil
				it.Click(&menu.CallbackData{MenuItem: it})
				got = append(got, it.Label+": "+log.calls[0])
			}
			want := []string{"Undo: edit undo", "Redo: edit redo", "Cut: edit cut", "Copy: edit copy",
				"Paste: edit paste", "Select All: edit selectAll"}
			if !slices.Equal(got, want) {
				t.Errorf("Edit items %q, want %q", got, want)
			}
		})
	}
}

// TestEditScript runs the Edit menu's scripts in Node against a stand-in page and checks
// what they do to the clipboard and the focused field.
func TestEditScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node not found: install Node.js 20")
	}
	input := `{tagName:'INPUT',value:'hello world',selectionStart:6,selectionEnd:11}`
	nasty := "a\"b'c\\d\n</script><b>&\u2028\u2029 ü 🙂`${x}`"
	tests := []struct {
		name      string
		cmd       editCommand
		clipboard string
		active    string // JavaScript of document.activeElement
		want      string // JSON of the calls the page saw
	}{
		{"undo", editUndo, "", "null", `[["exec","undo"]]`},
		{"redo", editRedo, "", "null", `[["exec","redo"]]`},
		{"select all", editSelectAll, "", "null", `[["exec","selectAll"]]`},
		{"copy from an input", editCopy, "", input, `[["clip","world"]]`},
		{"copy from the document", editCopy, "", `{tagName:'BODY'}`, `[["clip","page text"]]`},
		{"copy with nothing selected", editCopy, "", `{tagName:'TEXTAREA',value:'abc',selectionStart:1,selectionEnd:1}`, `[]`},
		{"cut from an input", editCut, "", input, `[["clip","world"],["exec","delete"]]`},
		{"paste text that needs escaping", editPaste, nasty, input, mustJSON(t, [][]any{{"exec", "insertText", false, nasty}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			js, err := editScript(tt.cmd, tt.clipboard)
			if err != nil {
				t.Fatal(err)
			}
			page := `const calls = [];
globalThis.window = {runtime: {ClipboardSetText: (t) => calls.push(['clip', t])}, getSelection: () => 'page text'};
globalThis.document = {activeElement: ` + tt.active + `, execCommand: (...a) => { calls.push(['exec', ...a]); return true; }};
eval(process.argv[1]);
process.stdout.write(JSON.stringify(calls));`
			out, err := exec.Command(node, "-e", page, js).CombinedOutput()
			if err != nil {
				t.Fatalf("node: %v\n%s\nscript: %s", err, out, js)
			}
			var got, want any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("node printed %q: %v", out, err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("page saw %s, want %s\nscript: %s", out, tt.want, js)
			}
		})
	}
	if _, err := editScript("format-disk", ""); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("unknown command: err = %v, want the invalid class", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNavigationWatch runs the injected route watcher in Node against a stand-in page: it
// reports the current route, every hash change, and installs itself once.
func TestNavigationWatch(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node not found: install Node.js 20")
	}
	page := `const reported = [];
const listeners = {};
globalThis.location = {hash: '#/agents'};
globalThis.window = {
  go: {app: {App: {Navigated: (r) => { reported.push(r); return Promise.resolve(); }}}},
  addEventListener: (ev, fn) => { (listeners[ev] = listeners[ev] || []).push(fn); },
};
eval(process.argv[1]);
eval(process.argv[1]); // a second page-ready must not add a second listener
location.hash = '#/settings/local-vm';
(listeners.hashchange || []).forEach((fn) => fn());
delete window.go; // bindings gone (page unloading): reporting must not throw
(listeners.hashchange || []).forEach((fn) => fn());
process.stdout.write(JSON.stringify({reported, hashchange: (listeners.hashchange || []).length}));`
	out, err := exec.Command(node, "-e", page, navigationWatchJS).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	want := `{"reported":["#/agents","#/settings/local-vm"],"hashchange":1}`
	if string(out) != want {
		t.Errorf("page saw %s, want %s", out, want)
	}
}
