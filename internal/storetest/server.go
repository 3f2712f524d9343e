package storetest

import (
	"testing"

	"github.com/chatrelay/chatrelay/internal/redistest"
)

// Server is a private redis-server (see package redistest).
type Server = redistest.Server

// ServerOptions configures a private server.
type ServerOptions = redistest.ServerOptions

// StartServer starts a redis-server of the test's own, killed at the end of
// the test; it fails the test if redis-server is not installed.
func StartServer(t testing.TB, opt ServerOptions) *Server { return redistest.StartServer(t, opt) }
