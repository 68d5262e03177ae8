package recording

import (
	"context"
	"slices"
	"time"

	"cubicle/backend/fault"
)

// Local is the recordings API (backend/api.Recordings) over this process's own Service: the
// server's wiring (backend/recordings.go) answers with it for the recordings kept here and
// asks a runner's link for those a runner keeps.
type Local struct{ *Service }

// List is accountID's recordings listed under agentID, newest first.
func (l Local) List(_ context.Context, accountID, agentID string) ([]Info, error) {
	return l.Service.List(accountID, agentID), nil
}

// Get returns recording id of accountID listed under agentID (else fault.ErrNotFound).
func (l Local) Get(_ context.Context, accountID, agentID, id string) (Info, error) {
	return l.Service.Get(accountID, agentID, id)
}

// Lookup returns recording id listed under agentID whatever its account.
func (l Local) Lookup(_ context.Context, agentID, id string) (Info, error) {
	i, err := l.Service.Lookup(id)
	if err == nil && !slices.Contains(i.AgentIDs, agentID) {
		return Info{}, fault.NotFound("recording %q not found", id)
	}
	return i, err
}

// Delete removes recording i (fault.ErrConflict while it is written).
func (l Local) Delete(_ context.Context, i Info) error { return l.Service.Delete(i.ID) }

// Screenshot returns the screenshot kept with marker n of recording i.
func (l Local) Screenshot(_ context.Context, i Info, n int) ([]byte, string, error) {
	return l.Service.ScreenshotData(i.ID, n)
}

// Play plays recording i (see Service.Play).
func (l Local) Play(ctx context.Context, i Info, from time.Duration, speed float64, ctrl <-chan Control, out Sink) error {
	return l.Service.Play(ctx, i.ID, from, speed, ctrl, out)
}
