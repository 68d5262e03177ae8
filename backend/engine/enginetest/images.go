package enginetest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
)

func (s *suite) testImages(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	img, err := s.images.InspectImage(ctx, s.image)
	if err != nil {
		t.Fatalf("InspectImage(%s): %v", s.image, err)
	}
	if img.ID == "" || img.Labels[engine.LabelManaged] != "true" || img.Labels[LabelRun] != s.run {
		t.Fatalf("imported image lacks id or labels: %+v", img)
	}
	if !slices.Contains(img.Names, s.image) {
		t.Errorf("image names %v lack %s", img.Names, s.image)
	}
	if img.Arch != "" && img.Arch != s.info.Arch {
		t.Errorf("image arch %q, engine arch %q", img.Arch, s.info.Arch)
	}

	list, err := s.images.ListImages(ctx, map[string]string{LabelRun: s.run})
	if err != nil {
		t.Fatalf("ListImages: %v", err)
	}
	if !slices.ContainsFunc(list, func(i engine.Image) bool { return i.ID == img.ID }) {
		t.Fatalf("ListImages(run label) = %v, lacks %s", list, short(img.ID))
	}
	if other, err := s.images.ListImages(ctx, map[string]string{LabelRun: s.run + "-other"}); err != nil || len(other) != 0 {
		t.Fatalf("ListImages(other run) = %v, %v; want none", other, err)
	}

	tag := "localhost/cubicle-enginetest/busybox:" + s.run + "-tag"
	if err := s.images.TagImage(ctx, img.ID, tag); err != nil {
		t.Fatalf("TagImage: %v", err)
	}
	tagged, err := s.images.InspectImage(ctx, tag)
	if err != nil || tagged.ID != img.ID {
		t.Fatalf("InspectImage(tag) = %s, %v; want %s", short(tagged.ID), err, short(img.ID))
	}
	if err := s.images.RemoveImage(ctx, tag); err != nil {
		t.Fatalf("RemoveImage(tag): %v", err)
	}
	if _, err := s.images.InspectImage(ctx, tag); !errors.Is(err, fault.ErrNotFound) {
		t.Fatalf("InspectImage(removed tag) = %v, want ErrNotFound", err)
	}
	if _, err := s.images.InspectImage(ctx, s.image); err != nil {
		t.Fatalf("removing a second tag removed the image: %v", err)
	}
}

func (s *suite) testBuild(t *testing.T) {
	dir := t.TempDir()
	file := "FROM " + s.image + "\nRUN echo built > /built.txt\nLABEL org.example.step=two\n"
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Other.containerfile"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec func(tag string, w *lineWriter) engine.BuildSpec
	}{
		{"dir", func(tag string, w *lineWriter) engine.BuildSpec {
			return engine.BuildSpec{ContextDir: dir, Tag: tag, Progress: w}
		}},
		{"stream", func(tag string, w *lineWriter) engine.BuildSpec {
			return engine.BuildSpec{Context: engine.TarDir(dir), Dockerfile: "Other.containerfile", Tag: tag, Progress: w}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t, 3*time.Minute)
			tag := "localhost/cubicle-enginetest/built:" + s.run + "-" + tt.name
			w := &lineWriter{}
			spec := tt.spec(tag, w)
			spec.Labels = s.withLabels(map[string]string{"org.example.kind": tt.name})
			start := time.Now()
			img, err := s.images.BuildImage(ctx, spec)
			if err != nil {
				t.Fatalf("BuildImage: %v\n%s", err, strings.Join(w.lines(), "\n"))
			}
			lines := w.lines()
			t.Logf("built %s in %v, %d progress lines", short(img.ID), time.Since(start).Round(time.Millisecond), len(lines))
			if len(lines) < 2 || !strings.Contains(strings.ToLower(strings.Join(lines, "\n")), "echo built") {
				t.Errorf("progress lines do not show the RUN step: %q", lines)
			}
			for k, want := range map[string]string{engine.LabelManaged: "true", LabelRun: s.run, "org.example.kind": tt.name, "org.example.step": "two"} {
				if img.Labels[k] != want {
					t.Errorf("label %s = %q, want %q (labels %v)", k, img.Labels[k], want, img.Labels)
				}
			}
			if !slices.Contains(img.Names, tag) {
				t.Errorf("built image names %v lack %s", img.Names, tag)
			}
		})
	}
	t.Run("failing step", func(t *testing.T) {
		ctx := testContext(t, 2*time.Minute)
		bad := t.TempDir()
		if err := os.WriteFile(filepath.Join(bad, "Containerfile"), []byte("FROM "+s.image+"\nRUN exit 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := s.images.BuildImage(ctx, engine.BuildSpec{ContextDir: bad, Tag: "localhost/cubicle-enginetest/bad:" + s.run, Labels: s.labels})
		if err == nil || fault.Class(err) == nil {
			t.Fatalf("BuildImage(failing RUN) = %v, want a classified error", err)
		}
	})
}
