//go:build !race

package filestore

const raceOn = false
