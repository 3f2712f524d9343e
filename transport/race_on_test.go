//go:build race

package transport

// raceOn: the race detector moves more values to the heap, so allocation
// counts are checked only without it.
const raceOn = true
