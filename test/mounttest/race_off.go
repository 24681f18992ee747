//go:build !race

package mounttest

const raceEnabled = false
