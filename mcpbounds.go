package chatrelay

import "time"

// MCPBounds are the bounds of MCP over HTTP (serve --mcp), per node: open
// sessions, those of one agent key, one key's tool calls in flight (its
// reads and waits, which the rate windows do not count), and how long a
// session may sit with no request. GET /api/limits.json states them.
type MCPBounds struct {
	MaxSessions       int           // defaults to DefaultMCPSessions
	MaxSessionsPerKey int           // defaults to DefaultMCPSessionsPerKey
	MaxCallsPerKey    int           // defaults to DefaultMCPCallsPerKey
	SessionIdle       time.Duration // defaults to DefaultMCPSessionIdle
}

// WithDefaults fills the zero fields of m.
func (m MCPBounds) WithDefaults() MCPBounds {
	orDefault(&m.MaxSessions, DefaultMCPSessions)
	orDefault(&m.MaxSessionsPerKey, DefaultMCPSessionsPerKey)
	orDefault(&m.MaxCallsPerKey, DefaultMCPCallsPerKey)
	orDefault(&m.SessionIdle, DefaultMCPSessionIdle)
	return m
}
