//go:build !race

package guard

const raceDetector = false
