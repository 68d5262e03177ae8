package wire

import "time"

// Watching a folder (docs/guest-protocol.md, "wait_dir"): an addition, listed as FeatureWatch
// in a driver's hello; an older driver answers CodeInvalid (unknown operation).
const (
	OpWaitDir    = "wait_dir"
	FeatureWatch = "watch"
	// MaxDirWait bounds one wait_dir.
	MaxDirWait = 5 * time.Minute
)

// WaitDirArgs waits until something in the folder Path changes (an entry created, removed,
// renamed, or a file written and closed), at most Timeout (MaxDirWait when 0 or above it).
type WaitDirArgs struct {
	Path    string        `json:"path"` // absolute, ~/… (the desktop user's home), or relative to the workspace
	Timeout time.Duration `json:"timeout"`
}

// DirChange is wait_dir's answer: whether the folder changed (false: the time ran out).
type DirChange struct {
	Changed bool `json:"changed"`
}
