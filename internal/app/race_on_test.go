//go:build race

package app_test

// raceEnabled: the race detector is on (the scale test runs smaller).
const raceEnabled = true
