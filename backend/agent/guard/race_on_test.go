//go:build race

package guard

// raceDetector is true in builds with the race detector, which runs the guard about ten
// times slower: the mutation suite then takes a sample of the cases (the full suite runs in
// the ordinary test pass).
const raceDetector = true
