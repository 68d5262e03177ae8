package deskegress

import (
	"errors"
	"testing"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Enforce: a desktop whose network cannot be entered (no process here) starts when its
// effective policy is open — the node's, or its agent's own over a closed node — and fails
// to start under any other.
func TestEnforceWhereNothingCanBeEnforced(t *testing.T) {
	m := New(Config{})
	defer m.Close()
	d := Desktop{InstanceID: "i1", AgentID: "ada"}
	closed := store.EgressPolicy{Mode: Closed}
	for _, tc := range []struct {
		name string
		ns   store.NodeSettings
		ok   bool
	}{
		{"node unset", store.NodeSettings{}, true},
		{"node open", store.NodeSettings{Egress: store.EgressPolicy{Mode: Open}}, true},
		{"agent open over a closed node", store.NodeSettings{Egress: closed, AgentEgress: map[string]store.EgressPolicy{"ada": {Mode: Open}}}, true},
		{"node closed", store.NodeSettings{Egress: closed}, false},
		{"agent closed over an open node", store.NodeSettings{AgentEgress: map[string]store.EgressPolicy{"ada": closed}}, false},
	} {
		err := m.Enforce(t.Context(), tc.ns, d)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, fault.ErrUnavailable) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
