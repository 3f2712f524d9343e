package host

import (
	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The verbs of one agent key (MCP over HTTP, contract Part 5): Verbs.Reaches
// is the key's scope and Verbs.AuthorName its name. A thread outside the
// scope is answered as a thread that is not there (NotFound), whether it
// exists or not, so a key learns nothing of the threads it does not reach.

// ForAgent is a copy of v (sharing its store and feed) that acts for the
// agent key k: its scope and its name.
func (v *Verbs) ForAgent(k chatrelay.AgentKey) *Verbs {
	a := &Verbs{Store: v.Store, Now: v.Now, Feed: v.feed(), PublicURL: v.PublicURL, AuthorName: k.Name, MaxAttachmentBytes: v.MaxAttachmentBytes,
		Caller: "agent " + k.ID + " " + k.Digest}
	if len(k.Threads) > 0 {
		a.Reaches = k.Reaches
	}
	return a
}

// ChangeFeed is the store's change feed the verbs follow (Verbs.Feed, made
// on first use).
func (v *Verbs) ChangeFeed() *store.Feed { return v.feed() }

// reaches reports whether thread is in the verbs' scope.
func (v *Verbs) reaches(thread string) bool { return v.Reaches == nil || v.Reaches(thread) }

// checkThread is InvalidThread for a malformed thread id, and NotFound for
// one outside the scope.
func (v *Verbs) checkThread(thread string) error {
	if err := checkThread(thread); err != nil {
		return err
	}
	if !v.reaches(thread) {
		return chatrelay.Errorf(chatrelay.NotFound, "no thread %s here", thread)
	}
	return nil
}

// inScope keeps the threads in the scope.
func (v *Verbs) inScope(infos []store.ThreadInfo) []store.ThreadInfo {
	if v.Reaches == nil {
		return infos
	}
	out := infos[:0:0]
	for _, i := range infos {
		if v.Reaches(i.Thread) {
			out = append(out, i)
		}
	}
	return out
}
