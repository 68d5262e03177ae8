//go:build !desktop

package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"cubicle/backend/cli"
	"cubicle/backend/fault"
)

func TestRunWithoutDesktopTag(t *testing.T) {
	err := Shell().Run(context.Background(), cli.Desktop{URL: "http://127.0.0.1:1"})
	if !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("err = %v, want the unavailable class", err)
	}
	if !strings.Contains(err.Error(), "cubicle serve") {
		t.Errorf("error %q does not point to `cubicle serve`", err)
	}
}
