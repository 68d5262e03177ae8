package engine

import "io"

// PullOptions tune an image pull or push.
type PullOptions struct {
	Progress io.Writer // progress lines are written here as they arrive; nil discards them
	// Insecure turns TLS verification off and allows plain HTTP, for a loopback or private
	// mirror. Never set it for a public registry.
	Insecure bool
}
