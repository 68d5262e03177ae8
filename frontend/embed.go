// Package frontend embeds the built web UI (frontend/dist, produced by `npm run build`) so
// that both shells, the Wails window and `cubicle serve`, ship the same files.
package frontend

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Assets returns the built UI rooted at its index.html. Built reports whether the UI was
// built at all (a fresh clone holds only a placeholder until `npm run build` runs).
func Assets() (assets fs.FS, built bool) {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern guarantees dist exists
	}
	_, err = fs.Stat(sub, "index.html")
	return sub, err == nil
}
