//go:build race

package filestore

// raceOn: the race detector moves more values to the heap, so allocation
// counts are checked only without it.
const raceOn = true
