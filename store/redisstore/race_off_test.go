//go:build !race

package redisstore

const raceOn = false
