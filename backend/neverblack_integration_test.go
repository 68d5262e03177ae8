package backend

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	_ "image/jpeg" // the agent's screenshots
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/engineconn"
	"cubicle/backend/models"
	"cubicle/backend/store"
)

// TestNeverBlackAfterIdleStop: a turn whose first tool call is a screenshot on a desktop that
// the idle timer stopped starts it again and gets the drawn desktop — never the black screen
// Xvfb shows before the session has drawn (issue 14 item 5). The model is scripted; the
// runtime, engine, image and driver are real.
func TestNeverBlackAfterIdleStop(t *testing.T) {
	b, _, ctx := startOnRealDesktop(t, slog.LevelWarn)
	var inst store.VMInstance
	defer func() {
		b.Close()
		if inst.ID != "" {
			removeDesktop(t, b, inst)
		}
	}()
	admin, err := b.Auth.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ag, err := b.Profiles.Create(admin.ID, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	model := &scriptedModel{}
	srv := httptest.NewServer(model)
	defer srv.Close()
	if _, err := b.Models.Set(models.Update{BaseURL: srv.URL + "/v1", Model: "scripted", AllowPrivate: &allowLoopback}); err != nil {
		t.Fatal(err)
	}
	model.push(callStep("a1", "computer_shell", map[string]any{"command": "true"}), textStep("ready"))
	if res := results(turn(t, b, admin.ID, ag.ID, "s1", "start")); res["a1"][0] != agent.StateSuccess {
		t.Fatalf("first turn: %+v", res["a1"])
	}
	if inst, err = instanceOf(b, admin.ID, ag.ID); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := b.VMs.StopInstance(sctx, inst.ID, "idle")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if v, err := b.VMs.Agent(ctx, admin.ID, ag.ID); err != nil || v.Desktop.State != "stopped" {
			t.Fatalf("after the stop: %+v %v", v.Desktop, err)
		}
		model.push(callStep("b1", "computer_screenshot", map[string]any{}), textStep("seen"))
		evs := turn(t, b, admin.ID, ag.ID, "s1", "what is on the screen?")
		if res := results(evs); res["b1"][0] != agent.StateSuccess {
			t.Fatalf("round %d: screenshot after the idle stop: %+v", round, res["b1"])
		}
		var shot []byte
		for _, e := range evs {
			if e.Type == agent.ToolResultDataDelta && e.ToolCallID == "b1" && e.Data != nil && e.Data.Type == "image" {
				shot, _ = base64.StdEncoding.DecodeString(e.Data.Data)
			}
		}
		img, _, err := image.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Fatalf("round %d: screenshot (%d bytes): %v", round, len(shot), err)
		}
		colours, black, total := map[uint32]bool{}, 0, 0
		bd := img.Bounds()
		for y := bd.Min.Y; y < bd.Max.Y; y += 4 {
			for x := bd.Min.X; x < bd.Max.X; x += 4 {
				r, g, bl, _ := img.At(x, y).RGBA()
				r, g, bl = r>>8, g>>8, bl>>8
				colours[r>>3<<10|g>>3<<5|bl>>3] = true
				if r < 12 && g < 12 && bl < 12 { // JPEG black
					black++
				}
				total++
			}
		}
		if len(colours) < 16 || black*2 >= total {
			t.Fatalf("round %d: the first screenshot after the start has %d colours and is %d%% black: not a drawn desktop",
				round, len(colours), black*100/total)
		}
		t.Logf("round %d: %d colours, %d%% black", round, len(colours), black*100/total)
	}
}

// removeDesktop removes a test's desktop container and its volumes (the product keeps them).
func removeDesktop(t *testing.T, b *Backend, inst store.VMInstance) {
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eng, err := engineconn.ConnectEngine(cctx, "podman", b.log)
	if err != nil {
		t.Logf("clean-up: %v", err)
		return
	}
	defer eng.Close()
	eng.Client.RemoveContainer(cctx, inst.ContainerName, true)
	if v, ok := eng.Client.(interface {
		RemoveVolume(ctx context.Context, name string) error
	}); ok {
		v.RemoveVolume(cctx, inst.WorkspaceVol)
		v.RemoveVolume(cctx, inst.ProfileVol)
	}
}
