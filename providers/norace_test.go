//go:build !race

package providers

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
