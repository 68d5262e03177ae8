package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cubicle/backend/agent"
)

// A screenshot reaches the client as the image the tool made, byte for byte, spliced into the
// response (no ref left behind); text goes out as it is, even when it looks like a ref.
func TestCallImage(t *testing.T) {
	data := shot(200 << 10)
	text := "Screenshot 1280x800 (frame 3). " + refPrefix + strings.Repeat("0", 32)
	s, cs := connectServer(t, []agent.ContentBlock{{Type: "text", Text: text}, {Type: "image", MediaType: "image/jpeg", Data: data}})
	want, _ := base64.StdEncoding.DecodeString(data)
	for range 2 {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "computer_click", Arguments: map[string]any{"agent": "a", "x": 1, "y": 2}})
		if err != nil || res.IsError || len(res.Content) != 2 {
			t.Fatalf("call: %v %+v", err, res)
		}
		if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != text {
			t.Fatalf("text: %#v", res.Content[0])
		}
		img, ok := res.Content[1].(*mcp.ImageContent)
		if !ok || img.MIMEType != "image/jpeg" || !bytes.Equal(img.Data, want) {
			t.Fatalf("image: %T %v, %d bytes (want %d)", res.Content[1], ok, len(img.Data), len(want))
		}
	}
	if s.images.pending() {
		t.Fatal("refs left after the responses")
	}
}

// An image that is not base64 is left out, as before (nothing unchecked is spliced into JSON).
func TestCallBadImage(t *testing.T) {
	_, cs := connectServer(t, []agent.ContentBlock{{Type: "image", MediaType: "image/png", Data: `"},"x":"`}})
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "computer_screenshot", Arguments: map[string]any{"agent": "a"}})
	if err != nil || len(res.Content) != 1 {
		t.Fatalf("call: %v %+v", err, res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.HasPrefix(tc.Text, "Done") {
		t.Fatalf("content: %#v", res.Content[0])
	}
}

// A ref is spliced only into a response of the session whose call made it, once.
func TestSpliceWriter(t *testing.T) {
	var s splices
	ref := s.add("A", "QUJD")
	event := []byte(`data: {"data":"` + ref + `"}` + "\n\n")
	rec := httptest.NewRecorder()
	w := &spliceWriter{ResponseWriter: rec, s: &s, session: "B"}
	if n, err := w.Write(event); err != nil || n != len(event) || rec.Body.String() != string(event) {
		t.Fatalf("other session: %d %v %q", n, err, rec.Body)
	}
	rec = httptest.NewRecorder()
	w = &spliceWriter{ResponseWriter: rec, s: &s, session: "A"}
	if n, err := w.Write(event); err != nil || n != len(event) || rec.Body.String() != `data: {"data":"QUJD"}`+"\n\n" {
		t.Fatalf("own session: %d %v %q", n, err, rec.Body)
	}
	rec = httptest.NewRecorder()
	w = &spliceWriter{ResponseWriter: rec, s: &s, session: "A"}
	if _, _ = w.Write(event); rec.Body.String() != string(event) || s.pending() {
		t.Fatalf("used twice: %q", rec.Body)
	}
}
