package transport_test

import (
	"testing"

	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestMain stops the redis-server that the tests of the Redis backend share
// (internal/storetest starts it on first use).
func TestMain(m *testing.M) { storetest.Main(m) }
