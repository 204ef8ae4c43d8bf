//go:build race

package proxy

// raceEnabled: under the race detector sync.Pool drops what is put in it
// at random, so allocation counts mean nothing.
const raceEnabled = true
