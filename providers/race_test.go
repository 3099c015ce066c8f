//go:build race

package providers

const raceEnabled = true
