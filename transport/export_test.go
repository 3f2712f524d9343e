package transport

import (
	"context"
	"time"
)

// SetTurnerIdle sets how long s's turner goroutines wait for a turn
// before they leave (turnerIdle): a test that lengthens it tells the
// goroutines Shutdown ends from those that left on their own. Call it
// before s serves.
func SetTurnerIdle(s *Server, d time.Duration) { s.turners.idle = d }

// SyncBuffer is syncBuffer for the external test package: a bytes.Buffer
// that a server's goroutines may write to while a test reads it.
type SyncBuffer = syncBuffer

// HoldLane takes every turn of the background lane, as other uploads'
// chunks would, and returns what gives them back.
func HoldLane() (leave func()) {
	for range background.Turns() {
		background.Enter(context.Background())
	}
	return func() {
		for range background.Turns() {
			background.Leave()
		}
	}
}

// LaneWaiting is how many pieces wait for a turn of the background lane.
func LaneWaiting() int { return background.Waiting() }

// AfterMax is afterMax: how many uploads' after-work may wait for the
// lane at once.
const AfterMax = afterMax
