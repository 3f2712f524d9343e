package filestore

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

func init() { store.Register("file", openSpec) }

// openSpec opens the file store of "file:DIR".
func openSpec(ctx context.Context, spec string, opt store.Options) (*store.Backend, error) {
	data := strings.TrimPrefix(spec, "file:")
	if data == "" {
		return nil, store.ConfigErrorf("store %q: file: needs a folder, as in file:./data", spec)
	}
	// Before anything is made there (serve.lock, settings.json, chat/).
	if err := checkOwner(data, os.Geteuid()); err != nil {
		return nil, folderFault(err)
	}
	b := &store.Backend{Where: "file:" + data}
	if opt.Serve {
		release, err := lockServe(data)
		if err != nil {
			return nil, folderFault(err)
		}
		b.OnClose(release)
	}
	set, err := reconcile(data, opt)
	if err != nil {
		b.Close()
		return nil, folderFault(err)
	}
	b.Settings = set
	f, err := OpenFile(data, FileOptions{
		Retention: set.Retention, MaxThreads: set.MaxThreads, NoFsync: opt.NoFsync,
		AppendLog: opt.AppendLog, Webhooks: set.Webhooks, Log: opt.Log, Now: opt.Now,
		TidyTemps: !opt.Serve, // a server's sweep removes them
	})
	if err != nil {
		b.Close()
		return nil, folderFault(err)
	}
	b.Store = f
	if len(set.Webhooks) > 0 {
		b.Outbox = f.Outbox()
	}
	b.TicketKey = KeyFile(keyPath(data), opt.Log)
	return b, nil
}

// folderFault is err, a data folder the store could not open (a file in
// its place, read-only, full, held by another server), as
// store_unavailable: the contract's code a command's "chatrelay: …" line
// and a script read. A coded error and a *store.ConfigError (the caller's
// to fix, exit 2) stay as they are.
func folderFault(err error) error {
	var ce *chatrelay.Error
	var cfg *store.ConfigError
	if errors.As(err, &ce) || errors.As(err, &cfg) {
		return err
	}
	return &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the data folder cannot be used", Retry: time.Second, Err: err}
}
