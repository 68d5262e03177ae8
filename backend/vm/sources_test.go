package vm

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"cubicle/backend/fault"
	"cubicle/backend/nodeapi"
	"cubicle/backend/store"
	"cubicle/images"
)

func TestImageSources(t *testing.T) {
	for _, v := range []string{images.EnvBaseImage, images.EnvBaseDigest, images.EnvCursorBase, images.EnvCursorDigest, images.EnvBaseSource} {
		t.Setenv(v, "")
	}
	f := newFixture(t, nil)
	f.start(nil)
	ctx := context.Background()
	pins := PinSource(f.st, DefaultNodeID, func(k string) string { return "" })
	d1, d2 := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64)

	t.Run("defaults", func(t *testing.T) {
		v, err := f.m.ImageSources()
		if err != nil {
			t.Fatal(err)
		}
		def := images.DefaultPins()
		if v.Standard.Image != def.Base.Image || v.Standard.Digest != def.Base.Digest || v.Standard.ImageFrom != FromDefault ||
			v.Cursor.Image != def.Cursor.Image || v.Cursor.DigestFrom != FromDefault || v.Cursor.Inherited != pinView(def.Cursor) || v.BaseSource != "auto" {
			t.Fatalf("ImageSources = %+v", v)
		}
		p, err := pins()
		if err != nil || p != def {
			t.Fatalf("pins = %+v, %v; want the defaults", p, err)
		}
	})

	t.Run("invalid values are refused and change nothing", func(t *testing.T) {
		before, _ := f.st.NodeSettings(DefaultNodeID)
		for _, tc := range []struct {
			name string
			u    ImageSourcesUpdate
			want string
		}{
			{"nothing", ImageSourcesUpdate{}, `send {"standard"`},
			{"cursor digest short", ImageSourcesUpdate{Cursor: &SourceUpdate{Digest: "sha256:abc"}}, "cursor.digest: digest \"sha256:abc\" is not of the form"},
			{"cursor digest upper case", ImageSourcesUpdate{Cursor: &SourceUpdate{Digest: strings.ToUpper(d1)}}, "cursor.digest"},
			{"cursor image with digest", ImageSourcesUpdate{Cursor: &SourceUpdate{Image: "mirror.example/u@" + d1}}, "cursor.image: image \"mirror.example/u@" + d1 + "\" contains a digest"},
			{"standard image not a reference", ImageSourcesUpdate{Standard: &SourceUpdate{Image: "http://mirror/debian"}}, "standard.image: image \"http://mirror/debian\" is not a valid image reference"},
			{"newline injection", ImageSourcesUpdate{Cursor: &SourceUpdate{Image: "mirror.example/u\nLABEL x=y"}}, "cursor.image"},
			{"shell metacharacters", ImageSourcesUpdate{Standard: &SourceUpdate{Image: "debian;rm -rf /"}}, "standard.image"},
			{"option-like", ImageSourcesUpdate{Standard: &SourceUpdate{Image: "--privileged"}}, "standard.image"},
			{"path traversal", ImageSourcesUpdate{Cursor: &SourceUpdate{Image: "localhost:5000/../etc/passwd"}}, "cursor.image"},
			{"name too long", ImageSourcesUpdate{Cursor: &SourceUpdate{Image: "mirror.example/" + strings.Repeat("a", 300)}}, "cursor.image"},
			{"digest with trailing newline", ImageSourcesUpdate{Cursor: &SourceUpdate{Digest: d1 + "\n"}}, "cursor.digest"},
			{"digest of another algorithm", ImageSourcesUpdate{Standard: &SourceUpdate{Digest: "sha512:" + strings.Repeat("a", 128)}}, "standard.digest"},
			// A valid part does not get saved when another part is invalid.
			{"one of two invalid", ImageSourcesUpdate{Standard: &SourceUpdate{Digest: d1}, Cursor: &SourceUpdate{Digest: "md5:00"}}, "cursor.digest"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := f.m.SetImageSources(ctx, tc.u)
				wantClass(t, "SetImageSources", err, fault.ErrInvalid, tc.want)
			})
		}
		if after, _ := f.st.NodeSettings(DefaultNodeID); !reflect.DeepEqual(after, before) {
			t.Fatalf("settings changed by refused updates: %+v → %+v", before, after)
		}
	})

	t.Run("saved values beat the environment, which beats the default", func(t *testing.T) {
		env := map[string]string{images.EnvCursorBase: "env.example/universal", images.EnvCursorDigest: d2}
		t.Setenv(images.EnvCursorBase, env[images.EnvCursorBase])
		t.Setenv(images.EnvCursorDigest, env[images.EnvCursorDigest])
		pins := PinSource(f.st, DefaultNodeID, func(k string) string { return env[k] })
		v, err := f.m.SetImageSources(ctx, ImageSourcesUpdate{Cursor: &SourceUpdate{Image: "127.0.0.1:5000/mirror/universal:sand-box-latest"}})
		if err != nil {
			t.Fatal(err)
		}
		c := v.Cursor
		if c.Image != "127.0.0.1:5000/mirror/universal:sand-box-latest" || c.ImageFrom != FromSettings || c.Digest != d2 || c.DigestFrom != FromEnvironment ||
			c.SavedImage != c.Image || c.SavedDigest != "" || c.Inherited != (nodeapi.Pin{Image: "env.example/universal", Digest: d2}) {
			t.Fatalf("cursor view %+v", c)
		}
		if v.Standard.ImageFrom != FromDefault {
			t.Fatalf("the standard base changed with the cursor's: %+v", v.Standard)
		}
		p, err := pins()
		if err != nil || p.Cursor != (images.Pin{Image: "127.0.0.1:5000/mirror/universal:sand-box-latest", Digest: d2}) || p.Base != images.DefaultPins().Base {
			t.Fatalf("pins = %+v, %v", p, err)
		}
		// The short name is saved fully qualified; an empty value goes back to inheriting.
		v, err = f.m.SetImageSources(ctx, ImageSourcesUpdate{Standard: &SourceUpdate{Image: "debian:bookworm", Digest: d1}, Cursor: &SourceUpdate{}})
		if err != nil {
			t.Fatal(err)
		}
		if v.Standard.Image != "docker.io/library/debian:bookworm" || v.Standard.DigestFrom != FromSettings || v.Cursor.ImageFrom != FromEnvironment || v.Cursor.SavedImage != "" {
			t.Fatalf("view %+v", v)
		}
		st, err := f.m.Status(ctx)
		if err != nil || st.ImageSources != v {
			t.Fatalf("Status().ImageSources = %+v, %v; want %+v", st.ImageSources, err, v)
		}
		ns, _ := f.st.NodeSettings(DefaultNodeID)
		if ns.BaseImage != "docker.io/library/debian:bookworm" || ns.BaseDigest != d1 || ns.CursorBase != "" || ns.CursorDigest != "" {
			t.Fatalf("stored %+v", ns)
		}
	})

	t.Run("an invalid environment value is reported and stops the pins", func(t *testing.T) {
		t.Setenv(images.EnvBaseDigest, "latest")
		env := map[string]string{images.EnvBaseDigest: "latest"}
		if _, err := PinSource(f.st, DefaultNodeID, func(k string) string { return env[k] })(); err == nil || !strings.Contains(err.Error(), images.EnvBaseDigest) {
			t.Fatalf("pins with %s=latest: %v", images.EnvBaseDigest, err)
		}
		v, err := f.m.ImageSources()
		if err != nil || !strings.Contains(v.Standard.Problem, images.EnvBaseDigest) || v.Cursor.Problem != "" {
			t.Fatalf("view %+v, %v: want the problem on the standard base", v, err)
		}
	})

	t.Run("another node's settings are its own", func(t *testing.T) {
		if _, err := f.st.UpdateNodeSettings("other", func(ns *store.NodeSettings) error { ns.CursorDigest = d1; return nil }); err != nil {
			t.Fatal(err)
		}
		p, err := PinSource(f.st, DefaultNodeID, func(string) string { return "" })()
		if err != nil || p.Cursor.Digest == d1 {
			t.Fatalf("pins of the local node = %+v, %v", p, err)
		}
	})
}
