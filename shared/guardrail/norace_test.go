//go:build !race

package guardrail

const raceEnabled = false
