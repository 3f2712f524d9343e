package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// splitPeers separates the runs of peers (a "target" field: --target
// centrifugo or ntfy) from chatrelay's.
func splitPeers(runs []map[string]any) (own, peers []map[string]any) {
	for _, m := range runs {
		if t := str(m, "target"); t != "" && t != "chatrelay" {
			peers = append(peers, m)
		} else {
			own = append(own, m)
		}
	}
	return own, peers
}

// peerColumn is one setup of a peer: its runs' target and label, and the
// chatrelay label they are set beside (--versus).
type peerColumn struct{ target, label, versus string }

func (c peerColumn) title() string {
	t := c.target + ", " + c.label
	if c.versus != "" {
		t += " (chatrelay: " + c.versus + ")"
	}
	return t
}

// writePeers prints the peers' table: a column per peer setup, each cell
// the peer's figure beside chatrelay's (build main, label versus) measured
// in the same run, and their ratio chatrelay/peer. own are chatrelay's
// runs, peers the peers'.
func writePeers(w io.Writer, own, peers []map[string]any, mainBuild string) {
	var cols []peerColumn
	all := slices.Clone(own)
	for _, m := range peers {
		c := peerColumn{str(m, "target"), str(m, "label"), str(m, "versus")}
		if !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
		// A peer's runs are a build of their own in the table: its target,
		// under the label of its setup.
		p := map[string]any{}
		for k, v := range m {
			p[k] = v
		}
		p["build"] = "peer:" + c.target
		p["label"] = c.label
		all = append(all, p)
	}
	t := newTable(all, mainBuild)
	if t.main == "" || strings.HasPrefix(t.main, "peer:") {
		t.main = "" // no chatrelay run: the peers' figures alone
	}
	fmt.Fprintln(w, "Peers measured in the same run: each cell is the peer's figure, then chatrelay's on the setup named in the column, and their ratio chatrelay/peer.")
	fmt.Fprintln(w)
	titles := make([]string, len(cols))
	for i, c := range cols {
		titles[i] = c.title()
	}
	t.writeRows(w, titles, func(f figure, i int) string { return t.peerCell(f, cols[i]) })
	var skips []string
	for _, m := range peers {
		if why, _ := m["skipped"].(string); why != "" {
			s := fmt.Sprintf("%s on %s: %s", str(m, "scenario"), str(m, "target"), why)
			if !slices.Contains(skips, s) {
				skips = append(skips, s)
			}
		}
	}
	for _, s := range skips {
		t.notes = append(t.notes, "not run: "+s)
	}
	t.writeNotes(w)
}

// peerCell is the peer's figure, chatrelay's beside it and their ratio.
func (t *table) peerCell(f figure, c peerColumn) string {
	if f.cell == nil { // the row of other work
		text, _ := t.otherCPU("peer:"+c.target, c.label)
		if o, ok := t.otherCPU(t.main, c.versus); ok && text != "" && t.main != "" && c.versus != "" {
			text += " (chatrelay: " + o + ")"
		}
		return text
	}
	text, val, ok, m := t.one("peer:"+c.target, f, c.label)
	if m != nil {
		text += t.noteMarks("peer:"+c.target, m)
	}
	if text == "" || t.main == "" || c.versus == "" {
		return text
	}
	otext, oval, ook, om := t.one(t.main, f, c.versus)
	if om != nil {
		otext += t.noteMarks(t.main, om)
	}
	switch {
	case ok && ook && val != 0 && oval != 0:
		return fmt.Sprintf("%s (chatrelay: %s, ×%.2f)", text, otext, oval/val)
	case otext != "":
		return fmt.Sprintf("%s (chatrelay: %s)", text, otext)
	}
	return text
}
