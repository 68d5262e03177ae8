package api

import (
	"io/fs"
	"net/http"
	"path"
	"strings"
)

const unbuiltPage = `<!doctype html><meta charset="utf-8"><title>Cubicle</title>
<body style="font-family:sans-serif;max-width:40em;margin:4em auto">
<h1>Cubicle</h1><p>The web UI has not been built into this binary.
Run <code>make build</code> (or <code>npm run build</code> in <code>frontend/</code> and rebuild) and start Cubicle again.
The API is available under <code>/api/</code>.</p></body>`

// ui serves the built single-page app: files by path, index.html for everything else (the
// app routes by URL hash), hashed assets cached for a year, index.html never.
func (s *Server) ui() http.Handler {
	if s.cfg.Assets == nil || !s.cfg.AssetsBuilt {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(unbuiltPage))
		})
	}
	files := http.FileServerFS(s.cfg.Assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "the UI only answers GET", Code: "invalid"})
			return
		}
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		if name == "" || name == "index.html" || !exists(s.cfg.Assets, name) {
			w.Header().Set("Cache-Control", "no-cache")
			http.ServeFileFS(w, r, s.cfg.Assets, "index.html")
			return
		}
		if strings.HasPrefix(name, "assets/") {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		}
		files.ServeHTTP(w, r)
	})
}

func exists(fsys fs.FS, name string) bool {
	st, err := fs.Stat(fsys, name)
	return err == nil && !st.IsDir()
}
