//go:build race

package ui_test

// raceDetector is true in a test binary built with -race.
const raceDetector = true
