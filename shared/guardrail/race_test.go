//go:build race

package guardrail

// raceEnabled: under the race detector sync.Pool drops what is put in it
// at random, so Go's regexp (which pools its matching machines) allocates.
const raceEnabled = true
