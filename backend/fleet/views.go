package fleet

import (
	"cubicle/backend/computer"
	"cubicle/backend/hostdesk"
)

// Anticipation is the answer of POST /api/app/agents/:id/opened: whether the desktop was
// started, its state, and why not.
type Anticipation struct {
	Started bool   `json:"started"`
	State   string `json:"state,omitempty"` // the desktop's state after it
	Why     string `json:"why,omitempty"`   // why it was not started
}

// HostView is the execution node's host screen for Settings → Host and the computer panel.
type HostView struct {
	NodeID        string              `json:"nodeId"`
	ScreenControl bool                `json:"screenControl"` // the admin's setting
	OS            computer.Permission `json:"os"`            // what the operating system allows
	Displays      []hostdesk.Display  `json:"displays"`
	// Available is ScreenControl and OS.Granted: host desktop tools are offered to "host" agents.
	Available bool   `json:"available"`
	Problem   string `json:"problem,omitempty"` // why not, and what to do
}
