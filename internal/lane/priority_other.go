//go:build !linux

package lane

// lowerPriority leaves the thread's priority as it is: outside Linux no
// call sets one thread's priority alone.
func lowerPriority() {}
