package vm

import (
	"context"
	"fmt"
	"os"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/images"
)

// DefaultNodeID is the node a Manager runs when Config.NodeID is empty: this machine.
const DefaultNodeID = "local"

// Where an image source value comes from, lowest precedence last.
const (
	FromSettings    = "settings"    // saved by an admin (Settings → Local VM)
	FromEnvironment = "environment" // CUBICLE_BASE_IMAGE, CUBICLE_CURSOR_DIGEST, …
	FromDefault     = "default"     // the pin built into this version of Cubicle
)

// resolved is one base's layers, resolved.
type resolved struct {
	view SourceView
	pin  images.Pin
	err  error // an invalid environment value
}

// resolveSource stacks saved values over the environment's (imageVar, digestVar) over def.
func resolveSource(def images.Pin, getenv func(string) string, imageVar, digestVar, savedImage, savedDigest string) resolved {
	r := resolved{view: SourceView{SavedImage: savedImage, SavedDigest: savedDigest, ImageFrom: FromDefault, DigestFrom: FromDefault}}
	inherited := def
	if v := strings.TrimSpace(getenv(imageVar)); v != "" {
		img, err := images.ParseImage(v)
		if err != nil {
			r.err = fault.Invalid("%s: %v", imageVar, err)
		} else {
			inherited.Image, r.view.ImageFrom = img, FromEnvironment
		}
	}
	if v := strings.TrimSpace(getenv(digestVar)); v != "" {
		if err := images.ValidDigest(v); err != nil {
			r.err = fault.Invalid("%s: %v", digestVar, err)
		} else {
			inherited.Digest, r.view.DigestFrom = v, FromEnvironment
		}
	}
	r.view.Inherited = pinView(inherited)
	r.pin = inherited
	if savedImage != "" {
		r.pin.Image, r.view.ImageFrom = savedImage, FromSettings
	}
	if savedDigest != "" {
		r.pin.Digest, r.view.DigestFrom = savedDigest, FromSettings
	}
	r.view.Image, r.view.Digest = r.pin.Image, r.pin.Digest
	if r.err != nil {
		r.view.Problem = r.err.Error()
	}
	return r
}

// sourcesOf resolves both bases for the node settings ns.
func sourcesOf(ns store.NodeSettings, getenv func(string) string) (std, cursor resolved) {
	def := images.DefaultPins()
	std = resolveSource(def.Base, getenv, images.EnvBaseImage, images.EnvBaseDigest, ns.BaseImage, ns.BaseDigest)
	cursor = resolveSource(def.Cursor, getenv, images.EnvCursorBase, images.EnvCursorDigest, ns.CursorBase, ns.CursorDigest)
	return std, cursor
}

// PinSource returns the images.Config.Pins function for a node's desktops: the settings an
// admin saved for node (in st), else the environment (getenv), else the built-in pins. It
// reads the store at every call, so a saved change applies to the next preparation. An
// invalid environment value is fault.ErrInvalid naming the variable. node "" is
// DefaultNodeID.
func PinSource(st *store.Store, node string, getenv func(string) string) func() (images.Pins, error) {
	if node == "" {
		node = DefaultNodeID
	}
	return func() (images.Pins, error) {
		ns, err := st.NodeSettings(node)
		if err != nil {
			return images.Pins{}, err
		}
		std, cursor := sourcesOf(ns, getenv)
		for _, r := range []resolved{std, cursor} {
			if r.err != nil {
				return images.Pins{}, r.err
			}
		}
		return images.Pins{Base: std.pin, Cursor: cursor.pin}, nil
	}
}

// ImageSources reports the bases in force and where each value comes from.
func (m *Manager) ImageSources() (ImageSources, error) {
	ns, err := m.st.NodeSettings(m.node)
	if err != nil {
		return ImageSources{}, err
	}
	return m.sourcesView(ns), nil
}

func (m *Manager) sourcesView(ns store.NodeSettings) ImageSources {
	std, cursor := sourcesOf(ns, os.Getenv)
	src, err := images.ParseBaseSource(os.Getenv(images.EnvBaseSource))
	bs := string(src)
	if err != nil {
		bs = "invalid: " + err.Error()
	}
	return ImageSources{Standard: std.view, Cursor: cursor.view, BaseSource: bs}
}

// SetImageSources saves the admin's base sources. Every given value is validated first (an
// image must parse as a reference without a digest, a digest must be sha256 and 64 lowercase
// hex digits); any invalid value is fault.ErrInvalid naming the field, and nothing changes.
// Prepared images and running desktops are not touched: the next preparation uses the new
// sources (a changed digest gives a new image tag).
func (m *Manager) SetImageSources(ctx context.Context, u ImageSourcesUpdate) (ImageSources, error) {
	if u.Standard == nil && u.Cursor == nil {
		return ImageSources{}, fault.Invalid(`send {"standard": {"image": "…", "digest": "sha256:…"}, "cursor": {…}}; ` +
			`an empty value inherits the environment's or the built-in one`)
	}
	type field struct {
		name string
		val  string
		dst  *string
		img  bool
	}
	var std, cur SourceUpdate
	var fields []field
	if u.Standard != nil {
		std = *u.Standard
		fields = append(fields, field{"standard.image", std.Image, &std.Image, true}, field{"standard.digest", std.Digest, &std.Digest, false})
	}
	if u.Cursor != nil {
		cur = *u.Cursor
		fields = append(fields, field{"cursor.image", cur.Image, &cur.Image, true}, field{"cursor.digest", cur.Digest, &cur.Digest, false})
	}
	for _, f := range fields {
		if f.val == "" {
			continue
		}
		if f.img {
			norm, err := images.ParseImage(f.val)
			if err != nil {
				return ImageSources{}, fault.Invalid("%s: %v", f.name, err)
			}
			*f.dst = norm
		} else if err := images.ValidDigest(f.val); err != nil {
			return ImageSources{}, fault.Invalid("%s: %v", f.name, err)
		}
	}
	ns, err := m.st.UpdateNodeSettings(m.node, func(ns *store.NodeSettings) error {
		if u.Standard != nil {
			ns.BaseImage, ns.BaseDigest = std.Image, std.Digest
		}
		if u.Cursor != nil {
			ns.CursorBase, ns.CursorDigest = cur.Image, cur.Digest
		}
		return nil
	})
	if err != nil {
		return ImageSources{}, fmt.Errorf("save the image sources: %w", err)
	}
	v := m.sourcesView(ns)
	m.log.Info("image sources changed", "standard", v.Standard.Image+"@"+v.Standard.Digest, "cursor", v.Cursor.Image+"@"+v.Cursor.Digest)
	return v, nil
}
