//go:build !unix

package bench

// usePeers claims the peers image for this run; without flock (Windows) there is no claim,
// and a parallel run with another standard image may remove it (see the Unix version).
func usePeers(string) (release func(), err error) { return func() {}, nil }

// claimUnused claims a peers image for its removal; without flock every one is free.
func claimUnused(string) (release func(), ok bool) { return func() {}, true }
