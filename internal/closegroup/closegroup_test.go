package closegroup

import (
	"testing"
	"testing/synctest"
)

// TestGroup: a member that entered before Close holds Wait until it
// leaves; after Close nobody enters.
func TestGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group
		if !g.Enter() {
			t.Fatal("Enter on an open group: false")
		}
		g.Close()
		if g.Enter() {
			t.Fatal("Enter after Close: true")
		}
		waited := make(chan struct{})
		go func() {
			g.Wait()
			close(waited)
		}()
		synctest.Wait() // the waiter is blocked in Wait, or done
		select {
		case <-waited:
			t.Fatal("Wait returned while a member was still in")
		default:
		}
		g.Leave()
		synctest.Wait()
		select {
		case <-waited:
		default:
			t.Fatal("Wait did not return once the last member left")
		}
	})
}
