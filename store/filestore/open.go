package filestore

import (
	"context"
	"strings"

	"github.com/chatrelay/chatrelay/store"
)

func init() { store.Register("file", openSpec) }

// openSpec opens the file store of "file:DIR".
func openSpec(ctx context.Context, spec string, opt store.Options) (*store.Backend, error) {
	data := strings.TrimPrefix(spec, "file:")
	if data == "" {
		return nil, store.ConfigErrorf("store %q: file: needs a folder, as in file:./data", spec)
	}
	b := &store.Backend{Where: "file:" + data}
	if opt.Serve {
		release, err := lockServe(data)
		if err != nil {
			return nil, err
		}
		b.OnClose(release)
	}
	set, err := reconcile(data, opt)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.Settings = set
	f, err := OpenFile(data, FileOptions{
		Retention: set.Retention, MaxThreads: set.MaxThreads, NoFsync: opt.NoFsync,
		AppendLog: opt.AppendLog, Webhooks: set.Webhooks, Log: opt.Log, Now: opt.Now,
		TidyTemps: !opt.Serve, // a server's sweep removes them
	})
	if err != nil {
		b.Close()
		return nil, err
	}
	b.Store = f
	if len(set.Webhooks) > 0 {
		b.Outbox = f.Outbox()
	}
	b.TicketKey = KeyFile(keyPath(data), opt.Log)
	return b, nil
}
