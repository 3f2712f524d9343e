//go:build race

package redisstore

// raceOn: the race detector moves more values to the heap, so allocation
// counts are checked only without it.
const raceOn = true
