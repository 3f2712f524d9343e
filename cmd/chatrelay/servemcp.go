package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/samekey"
	"github.com/chatrelay/chatrelay/mcpserver"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// mcpFlags are serve's flags of MCP over HTTP (--mcp).
type mcpFlags struct {
	on      bool
	opt     mcpserver.HTTPOptions
	every   positiveDuration
	handler *mcpserver.HTTP // made by start
}

func (f *mcpFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "mcp", false, "also serve the host's verbs over MCP's Streamable HTTP at <prefix>/mcp, to agents with a key (chatrelay agent add)")
	fs.IntVar(&f.opt.MaxSessions, "mcp-sessions", chatrelay.DefaultMCPSessions, "--mcp: open MCP sessions allowed on this node")
	fs.IntVar(&f.opt.MaxSessionsPerKey, "mcp-sessions-per-key", chatrelay.DefaultMCPSessionsPerKey, "--mcp: open MCP sessions allowed per agent key on this node")
	fs.IntVar(&f.opt.MaxCallsPerKey, "mcp-calls-per-key", chatrelay.DefaultMCPCallsPerKey, "--mcp: tool calls of one agent key in flight on this node (its reads and waits included); one more is refused "+string(chatrelay.TooManyStreams))
	fs.DurationVar(&f.opt.SessionIdle, "mcp-idle", chatrelay.DefaultMCPSessionIdle, "--mcp: an MCP session with no request for this long ends")
	f.every = positiveDuration(mcpserver.DefaultProgressEvery)
	fs.Var(&f.every, "progress-every", "--mcp: a wait (wait_messages, wait_interaction) sends notifications/progress every `duration` to a call that carries a progressToken")
}

func (f *mcpFlags) check() error {
	if f.opt.MaxSessions < 1 || f.opt.MaxSessionsPerKey < 1 || f.opt.MaxCallsPerKey < 1 {
		return usageError("--mcp-sessions, --mcp-sessions-per-key and --mcp-calls-per-key must be positive")
	}
	return tooShort(durationFloor{"--mcp-idle", f.opt.SessionIdle, minMCPIdle})
}

// start makes the MCP handler over the opened store, if --mcp, into cfg:
// the tool calls are counted by lim (the API's own limiter), and their
// audit lines go to log.
func (f *mcpFlags) start(st *store.Backend, cfg *transport.Config, lim chatrelay.RateLimiter, log *slog.Logger) error {
	if !f.on {
		return nil
	}
	agents, ok := st.Store.(store.Agents)
	if !ok {
		return fmt.Errorf("--mcp: the store %s keeps no agent keys", st.Where)
	}
	o := f.opt
	o.Agents, o.Limiter, o.Log, o.ProgressEvery = agents, lim, log, time.Duration(f.every)
	// A write with a client_id waits for the API's posts with the same
	// one, and they for it, as the posts do for each other: otherwise the
	// second finds the window's place the first holds taken, and is told
	// rate_limited where it is a repeat or a conflict.
	if cfg.Repeats == nil {
		cfg.Repeats = new(samekey.Keys)
	}
	o.Repeats = cfg.Repeats
	if cfg.Feed == nil { // one feed a process: the live streams' and the verbs'
		cfg.Feed = store.NewFeed(st.Store)
	}
	f.handler = mcpserver.NewHTTP(&host.Verbs{Store: st.Store, Feed: cfg.Feed, PublicURL: cfg.PublicURL, MaxAttachmentBytes: cfg.MaxAttachmentBytes}, o)
	cfg.MCP = f.handler
	return nil
}

// run ends revoked keys' sessions until ctx is done (nothing without --mcp).
func (f *mcpFlags) run(ctx context.Context) error {
	if f.handler == nil {
		return nil
	}
	return f.handler.Run(ctx)
}
