package api

import (
	"context"
	"net/http"

	"cubicle/backend/fault"
	"cubicle/backend/liveview"
)

// LiveView is the live view of agents' desktops: the computer channel the route below mounts
// and the desktop lookup the file routes share with it. *liveview.Channel is it; its methods
// are safe for concurrent use. The API checks who calls and for which agent; the live view
// serves the desktop's screen and input.
type LiveView interface {
	// Serve upgrades r and serves the channel until the connection ends. It returns an
	// error without answering when it takes no connection (it is closing); the route answers.
	Serve(w http.ResponseWriter, r *http.Request, c liveview.Caller) error
	// Status is the channel's status message for c (a plain GET of the route).
	Status(ctx context.Context, c liveview.Caller) liveview.Status
	// Desktop is the desktop the live view shows for the agent (never started by it).
	Desktop(ctx context.Context, accountID, agentID string) (liveview.Desktop, error)
	// Reauthenticate makes every open connection check its session now (an account was
	// disabled or its password changed); those whose session ended are closed.
	Reauthenticate()
}

var _ LiveView = (*liveview.Channel)(nil)

// computerRoute serves WS/GET /api/app/agents/{id}/computer with s.cfg.LiveView (nil answers
// 503). It authenticates itself so that, on the websocket upgrade only, an ?access_token=
// query parameter may carry the session token (a browser cannot set headers on a websocket);
// the guard has already checked Host and Origin. A plain GET returns the status message as
// JSON.
func (s *Server) computerRoute(w http.ResponseWriter, r *http.Request) {
	p, tok, ok := s.websocketCaller(w, r)
	if !ok {
		return
	}
	agentID := r.PathValue("id")
	if _, err := s.cfg.Profiles.Get(p.AccountID, agentID); err != nil {
		writeError(w, r, s.log, err)
		return
	}
	lv := s.cfg.LiveView
	if lv == nil {
		writeError(w, r, s.log, fault.Unavailable("the computer channel is not available on this server"))
		return
	}
	owns := func(agent string) error {
		_, err := s.cfg.Profiles.Get(p.AccountID, agent)
		return err
	}
	c := liveview.Caller{AccountID: p.AccountID, Username: p.Username, AgentID: agentID, Owns: owns,
		// The session is checked again while the channel is open: logging out, a password
		// change, disabling or deleting the account ends it.
		Valid: func() error {
			if _, err := s.cfg.Auth.Authenticate(tok); err != nil {
				return err
			}
			return owns(agentID)
		}}
	if !isUpgrade(r) {
		writeJSON(w, http.StatusOK, lv.Status(r.Context(), c))
		return
	}
	if err := lv.Serve(w, r, c); err != nil {
		writeError(w, r, s.log, err)
	}
}
