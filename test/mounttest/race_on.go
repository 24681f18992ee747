//go:build race

package mounttest

// raceEnabled: the tests run under the race detector, so the esfs binary
// they start is built with it too.
const raceEnabled = true
