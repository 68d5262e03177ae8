package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"

	"cubicle/backend/fault"
	"cubicle/backend/release"
	"cubicle/backend/store"
	"cubicle/runner/wire"
)

// RunnerUpdates is the update side of the runner registry (*nodes.Hub): channels, a runner's
// channel, the Update action, capability checks of node settings and runner authentication
// for downloads.
type RunnerUpdates interface {
	Channels() (release.Channels, error)
	SetChannels(c release.Channels, by string) (release.Channels, error)
	SetChannel(id, channel string) (string, error)
	Update(ctx context.Context, id string) (wire.UpdateResult, error)
	Require(node, capability, setting string) error
	Authenticate(r *http.Request) (store.Runner, error)
}

func (s *Server) releaseRoutes(mux *router) {
	mux.Handle("GET "+wire.DownloadPath, http.HandlerFunc(s.runnerDownload))
	mux.Handle("GET /api/runner/binaries", http.HandlerFunc(s.runnerBinaries))
	mux.Handle("GET /api/app/admin/runner-channels", s.admin(s.getRunnerChannels))
	mux.Handle("PUT /api/app/admin/runner-channels", s.admin(s.putRunnerChannels))
	mux.Handle("PUT /api/app/admin/runners/{id}/channel", s.admin(s.putRunnerChannel))
	mux.Handle("POST /api/app/admin/runners/{id}/update", s.admin(s.updateRunner))
}

func (s *Server) updates(w http.ResponseWriter, r *http.Request) (RunnerUpdates, bool) {
	if u, ok := s.cfg.Runners.(RunnerUpdates); ok && s.cfg.Runners != nil {
		return u, true
	}
	writeError(w, r, s.log, fault.Unavailable("runners are not available on this server"))
	return nil, false
}

// downloader lets a runner (by its token) or an administrator (by a session) download; it
// writes the refusal and returns false otherwise. Never anonymous.
func (s *Server) downloader(w http.ResponseWriter, r *http.Request) bool {
	if u, ok := s.cfg.Runners.(RunnerUpdates); ok && s.cfg.Runners != nil {
		_, err := u.Authenticate(r)
		if err == nil {
			return true
		}
		if errors.Is(err, fault.ErrForbidden) { // a revoked runner's token
			writeError(w, r, s.log, err)
			return false
		}
	}
	tok := token(r)
	if tok == "" {
		writeError(w, r, s.log, fault.New(fault.ErrUnauthenticated,
			"send the runner's token as Authorization: Bearer <token> (or log in as an administrator)"))
		return false
	}
	p, err := s.cfg.Auth.Authenticate(tok)
	if err != nil {
		writeError(w, r, s.log, err)
		return false
	}
	if !p.Admin() {
		writeError(w, r, s.log, fault.Forbidden("only runners and administrators can download the runner binary"))
		return false
	}
	return true
}

// runnerDownload is GET /api/runner/download?os=&arch=[&version=]: the cubicle binary for that
// platform (default version: the server's own), with its SHA-256 in X-Cubicle-Sha256.
func (s *Server) runnerDownload(w http.ResponseWriter, r *http.Request) {
	if !s.downloader(w, r) {
		return
	}
	if s.cfg.Dist == nil {
		writeError(w, r, s.log, fault.Unavailable("this server offers no runner binaries"))
		return
	}
	q := r.URL.Query()
	if q.Get("os") == "" || q.Get("arch") == "" {
		writeError(w, r, s.log, fault.Invalid("send ?os=linux|darwin|windows&arch=amd64|arm64 (GET /api/runner/binaries lists what this server offers)"))
		return
	}
	b, err := s.cfg.Dist.Find(q.Get("os"), q.Get("arch"), q.Get("version"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	f, err := b.Open()
	if err != nil {
		writeError(w, r, s.log, fault.NotFound("the binary for %s/%s went away: %v", b.OS, b.Arch, err))
		return
	}
	defer f.Close()
	name := "cubicle"
	if b.OS == "windows" {
		name += ".exe"
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
	h.Set("Content-Length", strconv.FormatInt(b.Size, 10))
	h.Set(wire.HeaderSHA256, b.SHA256)
	h.Set(wire.HeaderVersion, b.Version)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		io.CopyN(w, f, b.Size)
	}
}

// runnerBinaries is GET /api/runner/binaries: {version, binaries: [{os, arch, version, sha256,
// size, source}]}, what the server offers.
func (s *Server) runnerBinaries(w http.ResponseWriter, r *http.Request) {
	if !s.downloader(w, r) {
		return
	}
	list := []release.Binary{}
	if s.cfg.Dist != nil {
		list = append(list, s.cfg.Dist.List()...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": s.cfg.Version, "binaries": list})
}

type channelsJSON struct {
	Release       release.Channel `json:"release"`
	Canary        release.Channel `json:"canary"`
	ServerVersion string          `json:"serverVersion"`
	Versions      []string        `json:"versions"` // versions the server offers binaries of
}

func (s *Server) channelsAnswer(c release.Channels) channelsJSON {
	out := channelsJSON{Release: c.Release, Canary: c.Canary, ServerVersion: s.cfg.Version, Versions: []string{}}
	if s.cfg.Dist != nil {
		for _, b := range s.cfg.Dist.List() {
			if !slices.Contains(out.Versions, b.Version) {
				out.Versions = append(out.Versions, b.Version)
			}
		}
	}
	return out
}

func (s *Server) getRunnerChannels(w http.ResponseWriter, r *http.Request) {
	u, ok := s.updates(w, r)
	if !ok {
		return
	}
	c, err := u.Channels()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, s.channelsAnswer(c))
}

// putRunnerChannels saves {release: {version, rolloutPercent}, canary: {…}}; both are required.
func (s *Server) putRunnerChannels(w http.ResponseWriter, r *http.Request) {
	u, ok := s.updates(w, r)
	if !ok {
		return
	}
	var body struct {
		Release *release.Channel `json:"release"`
		Canary  *release.Channel `json:"canary"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Release == nil || body.Canary == nil {
		writeError(w, r, s.log, fault.Invalid(`send {"release": {"version": "…", "rolloutPercent": 0..100}, "canary": {"version": "…", "rolloutPercent": 0..100}}`))
		return
	}
	c, err := u.SetChannels(release.Channels{Release: *body.Release, Canary: *body.Canary}, principal(r).Username)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, s.channelsAnswer(c))
}

func (s *Server) putRunnerChannel(w http.ResponseWriter, r *http.Request) {
	u, ok := s.updates(w, r)
	if !ok {
		return
	}
	var body struct {
		Channel string `json:"channel"`
	}
	if err := decode(r, &body); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	if body.Channel == "" {
		writeError(w, r, s.log, fault.Invalid(`send {"channel": "release"} or {"channel": "canary"}`))
		return
	}
	ch, err := u.SetChannel(r.PathValue("id"), body.Channel)
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "channel": ch})
}

// updateRunner is POST /api/app/admin/runners/:id/update: 202 {from, version} once the runner
// verified the new binary (it then restarts and reconnects as that version).
func (s *Server) updateRunner(w http.ResponseWriter, r *http.Request) {
	u, ok := s.updates(w, r)
	if !ok {
		return
	}
	res, err := u.Update(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	s.log.Info("runner update asked", "node", r.PathValue("id"), "to", res.Version, "by", principal(r).Username)
	writeJSON(w, http.StatusAccepted, map[string]any{"id": r.PathValue("id"), "from": res.From, "version": res.Version})
}

// requireCapability refuses (409) a node setting a connected runner cannot apply; it writes the
// refusal and returns false.
func (s *Server) requireCapability(w http.ResponseWriter, r *http.Request, capability, setting string) bool {
	node := r.URL.Query().Get("node")
	if node == "" {
		return true
	}
	u, ok := s.cfg.Runners.(RunnerUpdates)
	if !ok || s.cfg.Runners == nil {
		return true
	}
	if err := u.Require(node, capability, setting); err != nil {
		writeError(w, r, s.log, err)
		return false
	}
	return true
}
