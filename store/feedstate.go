package store

// FeedStater is implemented by a store whose change feed can lose its
// source while the store itself still answers (the Redis backend's
// subscription). The readiness probe asks it: while FeedLive is false,
// messages are stored but not pushed to this node's live streams (they
// are, late, once the feed has caught up), so the node should not get new
// clients. A store that does not implement it has a feed that is live
// whenever Follow runs.
type FeedStater interface {
	// FeedLive reports whether every Follow call in progress is
	// subscribed and caught up (true when none is in progress).
	FeedLive() bool
}
