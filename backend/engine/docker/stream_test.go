package docker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"cubicle/backend/fault"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		class error
	}{
		{"not found", fmt.Errorf("x: %w", cerrdefs.ErrNotFound), fault.ErrNotFound},
		{"conflict", cerrdefs.ErrConflict, fault.ErrConflict},
		{"already exists", cerrdefs.ErrAlreadyExists, fault.ErrConflict},
		{"invalid", cerrdefs.ErrInvalidArgument, fault.ErrInvalid},
		{"unauthorized", cerrdefs.ErrUnauthenticated, fault.ErrForbidden},
		{"permission", cerrdefs.ErrPermissionDenied, fault.ErrForbidden},
		{"internal", cerrdefs.ErrInternal, fault.ErrUnavailable},
		{"raw 404", &statusError{status: http.StatusNotFound, msg: "no"}, fault.ErrNotFound},
		{"plain", errors.New("connection reset"), fault.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fault.Class(fail("op", tt.err)); got != tt.class {
				t.Fatalf("class = %v, want %v", got, tt.class)
			}
		})
	}
}

func TestReadStream(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		out     string
		aux     string
		wantErr string
	}{
		{"build", `{"stream":"Step 1/2 : FROM x\n"}{"stream":"done\n"}{"aux":{"ID":"sha256:ab"}}`, "Step 1/2 : FROM x\ndone\n", `{"ID":"sha256:ab"}`, ""},
		{"pull status without bars", `{"status":"Pulling fs layer","id":"abc"}{"status":"Downloading","id":"abc","progress":"[=> ]"}{"status":"Done"}`, "abc: Pulling fs layer\nDone\n", "", ""},
		{"error detail", `{"stream":"a\n"}{"errorDetail":{"message":"boom"},"error":"boom"}`, "a\n", "", "boom"},
		{"error string", `{"error":"bad"}`, "", "", "bad"},
		{"broken json", `{"stream":`, "", "", "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			var aux string
			err := readStream(strings.NewReader(tt.in), &out, func(r json.RawMessage) { aux = string(r) })
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if out.String() != tt.out || aux != tt.aux {
				t.Fatalf("out %q aux %q; want %q %q", out.String(), aux, tt.out, tt.aux)
			}
		})
	}
}
