//go:build !linux

package lane

// lowerPriority leaves the thread's priority as it is: outside Linux no
// call sets one thread's priority alone.
func lowerPriority() {}

// mainThread is false: outside Linux no thread's priority is lowered, so
// none needs keeping off the main thread.
func mainThread() bool { return false }
