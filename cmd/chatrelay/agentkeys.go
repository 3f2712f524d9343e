package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// agent manages the agent keys of MCP over HTTP (serve --mcp; contract
// Part 5):
//
//	chatrelay agent add NAME [--threads all | THREAD,…]
//	chatrelay agent list [--json]
//	chatrelay agent revoke ID
//
// add prints the key alone on standard output, this once (the store keeps
// its SHA-256 digest), and what it is on standard error. A revoke ends
// the key's MCP sessions on every running server within a second.
func agent(ctx context.Context, e cmdEnv) error {
	sf := storeFlags{}
	sf.register(e.fs, true)
	threads := e.fs.String("threads", chatrelay.ScopeAll, "add: the threads the key reaches: `all`, or thread ids separated by commas")
	asJSON := e.fs.Bool("json", false, "list: one JSON array")
	verb, args, err := e.parseForm(form{"add", 1, "NAME"}, form{"list", 0, "no operands"}, form{"revoke", 1, "ID"})
	if err != nil {
		return err
	}
	st, err := sf.openHost(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	agents, ok := st.Store.(store.Agents)
	if !ok {
		return fmt.Errorf("the store %s keeps no agent keys", st.Where)
	}
	switch verb {
	case "add":
		key, k, err := chatrelay.NewAgentKey(args[0], strings.Split(*threads, ","), time.Now())
		if err != nil {
			return err
		}
		if err := agents.AddAgent(ctx, k); err != nil {
			return err
		}
		a := k.Public()
		fmt.Fprintf(e.stderr, "agent key %s for %q, threads: %s. It is shown this once (the store keeps only its digest): give it to the agent as Authorization: Bearer <key> on %s\n",
			a.ID, oneLine(a.Name), strings.Join(a.Threads, ","), chatrelay.PathMCP)
		_, err = fmt.Fprintln(e.stdout, key)
		return err
	case "revoke":
		if !chatrelay.ValidAgentID(args[0]) {
			return chatrelay.Errorf(chatrelay.NotFound, "no agent key %q: an id is a_ and 8 hex", args[0])
		}
		k, err := agents.RevokeAgent(ctx, args[0])
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "revoked %s (%s)\n", k.ID, oneLine(k.Name))
		return err
	}
	keys, err := agents.AgentKeys(ctx)
	if err != nil {
		return err
	}
	list := make([]chatrelay.AgentInfo, 0, len(keys))
	for _, k := range keys {
		list = append(list, k.Public())
	}
	if *asJSON {
		return printJSON(e.stdout, list)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTHREADS\tSTATE\tCREATED (UTC)")
	for _, a := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.ID, oneLine(a.Name), strings.Join(a.Threads, ","), a.State, utc(a.CreatedAt))
	}
	return tw.Flush()
}
