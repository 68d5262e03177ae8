package backend

import (
	"log/slog"
	"strings"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/agent/anthropic/anthropictest"
	"cubicle/backend/agent/responses/responsestest"
	"cubicle/backend/models"
	"cubicle/backend/store"
)

// TestNativeProvidersOnRealDesktop drives the real runtime on a real desktop (the standard
// image in Podman, the real driver) through each vendor-native adapter, with a scripted server
// speaking the vendor's wire format: screenshot → click → key (a terminal opens) → type → key
// → screenshot, then the shell reads back what was typed. The guard, gate and history are the
// app's own.
// terminalOpen waits (through the shell tool) until the terminal that Ctrl+Alt+T started has
// a process, and a moment more for its window, so that the click and the typing reach it.
const terminalOpen = "for i in $(seq 40); do pgrep -x xfce4-terminal >/dev/null && break; sleep 0.25; done; sleep 2; pgrep -x xfce4-terminal"

// readTyped reads the file the typed command writes, once the terminal ran it.
func readTyped(path string) string {
	return "for i in $(seq 20); do [ -s " + path + " ] && break; sleep 0.5; done; cat " + path
}

func TestNativeProvidersOnRealDesktop(t *testing.T) {
	b, _, _ := startOnRealDesktop(t, slog.LevelWarn)
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.UpdateAgent(ag.ID, func(a *store.Agent) error { a.Computer = "vm"; return nil }); err != nil {
		t.Fatal(err)
	}
	firstShot := func(evs []agent.Event) (first, last string) {
		for _, e := range evs {
			if e.Type == agent.ToolResultDataDelta && e.Data != nil && e.Data.Type == "image" {
				if first == "" {
					first = e.Data.Data
				}
				last = e.Data.Data
			}
		}
		return first, last
	}
	check := func(t *testing.T, evs []agent.Event, word, shellID string) {
		t.Helper()
		r := evs[len(evs)-2].Result
		if r == nil || r.Metadata["error"] != nil {
			t.Fatalf("turn failed: %+v", r)
		}
		res := results(evs)
		for id, st := range res {
			if st[0] != agent.StateSuccess {
				t.Fatalf("%s: %s %q", id, st[0], st[1])
			}
		}
		if !strings.Contains(res[shellID][1], word) {
			t.Fatalf("the typed text %q is not in the file the terminal wrote: %q", word, res[shellID][1])
		}
		first, last := firstShot(evs)
		if first == "" || first == last {
			t.Fatal("the screen did not change between the first and the last screenshot")
		}
	}

	t.Run("anthropic", func(t *testing.T) {
		srv := anthropictest.New("sk-ant-it")
		defer srv.Close()
		key := "sk-ant-it"
		if _, err := b.Models.Set(models.Update{BaseURL: srv.URL, Model: "claude-sonnet-4-5", Provider: models.ProviderAnthropic,
			APIKey: &key, AllowPrivate: &allowLoopback}); err != nil {
			t.Fatal(err)
		}
		word := "typed-by-anthropic"
		var display []float64
		srv.Push(
			anthropictest.Call("a1", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
			anthropictest.Call("a2", "computer", anthropictest.Fixed(map[string]any{"action": "key", "text": "ctrl+alt+t"})),
			anthropictest.Call("a3", "bash", anthropictest.Fixed(map[string]any{"command": terminalOpen})),
			anthropictest.Call("a4", "computer", func(s anthropictest.Seen) any {
				tl := anthropictest.Tools(s.Body)[0]
				display = []float64{tl["display_width_px"].(float64), tl["display_height_px"].(float64)}
				// the terminal opens in the middle of the screen: the click focuses it
				return map[string]any{"action": "left_click", "coordinate": []int{int(display[0]) / 2, int(display[1]) / 2}}
			}),
			anthropictest.Call("a5", "computer", anthropictest.Fixed(map[string]any{"action": "type", "text": "echo " + word + " > /home/cua/workspace/typed.txt"})),
			anthropictest.Call("a6", "computer", anthropictest.Fixed(map[string]any{"action": "key", "text": "Return"})),
			anthropictest.Call("a7", "computer", anthropictest.Fixed(map[string]any{"action": "screenshot"})),
			anthropictest.Call("a8", "bash", anthropictest.Fixed(map[string]any{"command": readTyped("/home/cua/workspace/typed.txt")})),
			anthropictest.Say("The terminal shows it."),
		)
		evs := turn(t, b, admin.ID, ag.ID, "anthropic", "type in a terminal")
		check(t, evs, word, "a8")
		if len(display) != 2 || display[0] != 1280 || display[1] != 800 {
			t.Fatalf("declared display %v (the standard desktop is 1280x800, WXGA: not scaled)", display)
		}
		if srv.Left() != 0 {
			t.Fatalf("%d scripted steps unused", srv.Left())
		}
	})

	t.Run("openai-responses", func(t *testing.T) {
		srv := responsestest.New("sk-it")
		defer srv.Close()
		key := "sk-it"
		if _, err := b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "computer-use-preview", Provider: models.ProviderResponses,
			APIKey: &key, AllowPrivate: &allowLoopback}); err != nil {
			t.Fatal(err)
		}
		word := "typed-by-responses"
		var display []float64
		act := func(a map[string]any) func(responsestest.Seen) map[string]any {
			return func(responsestest.Seen) map[string]any { return a }
		}
		srv.Push(
			responsestest.ComputerCall("r1", act(map[string]any{"type": "screenshot"})),
			responsestest.ComputerCall("r2", act(map[string]any{"type": "keypress", "keys": []any{"CTRL", "ALT", "T"}})),
			responsestest.FunctionCall("r3", "computer_shell", map[string]any{"command": terminalOpen}),
			responsestest.ComputerCall("r4", func(s responsestest.Seen) map[string]any {
				tl := s.Body["tools"].([]any)[0].(map[string]any)
				display = []float64{tl["display_width"].(float64), tl["display_height"].(float64)}
				return map[string]any{"type": "click", "button": "left", "x": int(display[0]) / 2, "y": int(display[1]) / 2}
			}),
			responsestest.ComputerCall("r5", act(map[string]any{"type": "type", "text": "echo " + word + " > /home/cua/workspace/typed2.txt"})),
			responsestest.ComputerCall("r6", act(map[string]any{"type": "keypress", "keys": []any{"ENTER"}})),
			responsestest.ComputerCall("r7", act(map[string]any{"type": "screenshot"})),
			responsestest.FunctionCall("r8", "computer_shell", map[string]any{"command": readTyped("/home/cua/workspace/typed2.txt")}),
			responsestest.Say("Done."),
		)
		evs := turn(t, b, admin.ID, ag.ID, "responses", "type in a terminal")
		check(t, evs, word, "r8")
		if len(display) != 2 || display[0] >= 1280 || display[0] < 1000 {
			t.Fatalf("declared display %v (1280x800 is scaled to the XGA area)", display)
		}
		if srv.Left() != 0 {
			t.Fatalf("%d scripted steps unused", srv.Left())
		}
	})
}
