package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// settingsFile is the JSON form of Settings.
type settingsFile struct {
	RetentionMessages int    `json:"retention_messages"`
	RetentionAge      string `json:"retention_age"` // a Go duration, "720h0m0s"
	MaxThreads        int    `json:"max_threads"`
	PublicURL         string `json:"public_url,omitempty"`
	// Webhooks are the destinations the server delivers to (their IDs,
	// never their URLs): every writer of the folder queues for them.
	Webhooks []string `json:"webhooks,omitempty"`
}

func settingsPath(data string) string { return filepath.Join(data, "settings.json") }

// reconcile returns the settings to open the folder with. A server
// (opt.Serve) takes its options (zero fields: the defaults) and records
// them. Any other command takes what the folder records, and refuses an
// option that contradicts it (*ConfigError); a folder no server recorded
// takes the given options and the defaults.
func reconcile(data string, opt store.Options) (store.Settings, error) {
	given := store.Settings{Retention: opt.Retention, MaxThreads: opt.MaxThreads}
	withDefaults := func(s store.Settings) store.Settings {
		s.Retention = s.Retention.WithDefaults()
		if s.MaxThreads <= 0 {
			s.MaxThreads = chatrelay.DefaultMaxThreads
		}
		return s
	}
	if opt.Serve {
		given.PublicURL, given.Webhooks = opt.PublicURL, opt.Webhooks
		set := withDefaults(given)
		if err := os.MkdirAll(data, 0o700); err != nil {
			return set, fmt.Errorf("store: %w", err)
		}
		return set, recordSettings(data, set, !opt.NoFsync)
	}
	rec, ok, err := readSettings(data)
	if err != nil || !ok {
		return withDefaults(given), err
	}
	conflict := func(flag, have, want string) error {
		return store.ConfigErrorf("--%s %s contradicts the data folder %s, which its server keeps with %s (recorded in %s): drop the flag, or restart chatrelay serve with --%s %s",
			flag, want, data, have, settingsPath(data), flag, want)
	}
	if n := given.Retention.Messages; n > 0 && n != rec.Retention.Messages {
		return rec, conflict("retention-messages", strconv.Itoa(rec.Retention.Messages), strconv.Itoa(n))
	}
	if a := given.Retention.Age; a > 0 && a != rec.Retention.Age {
		return rec, conflict("retention-age", rec.Retention.Age.String(), a.String())
	}
	if n := given.MaxThreads; n > 0 && n != rec.MaxThreads {
		return rec, conflict("max-threads", strconv.Itoa(rec.MaxThreads), strconv.Itoa(n))
	}
	return rec, nil
}

// readSettings reads what the folder's server recorded; ok is false if no
// server did.
func readSettings(data string) (store.Settings, bool, error) {
	b, err := os.ReadFile(settingsPath(data))
	if errors.Is(err, fs.ErrNotExist) {
		return store.Settings{}, false, nil
	}
	if err != nil {
		return store.Settings{}, false, fmt.Errorf("store: settings: %w", err)
	}
	var f settingsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return store.Settings{}, false, fmt.Errorf("store: %s does not parse: %w", settingsPath(data), err)
	}
	age, err := time.ParseDuration(f.RetentionAge)
	if err != nil || age <= 0 || f.RetentionMessages <= 0 || f.MaxThreads <= 0 ||
		slices.ContainsFunc(f.Webhooks, func(id string) bool { return !store.ValidDestinationID(id) }) { // each names a queue file under webhooks/
		return store.Settings{}, false, fmt.Errorf("store: %s holds settings out of range", settingsPath(data))
	}
	return store.Settings{Retention: chatrelay.Retention{Messages: f.RetentionMessages, Age: age}, MaxThreads: f.MaxThreads, PublicURL: f.PublicURL, Webhooks: f.Webhooks}, true, nil
}

// recordSettings writes set as the folder's settings, atomically, under
// the settings' lock.
func recordSettings(data string, set store.Settings, sync bool) error {
	b, _ := json.MarshalIndent(settingsFile{
		RetentionMessages: set.Retention.Messages, RetentionAge: set.Retention.Age.String(), MaxThreads: set.MaxThreads,
		PublicURL: set.PublicURL, Webhooks: set.Webhooks,
	}, "", "  ")
	unlock, err := lockPath(context.Background(), settingsPath(data)+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return err
	}
	defer unlock()
	f, _, err := writeFile(data, "settings.json", append(b, '\n'), sync)
	if err != nil {
		return fmt.Errorf("store: record settings: %w", err)
	}
	return f.Close()
}

// tryLockServe takes serve.lock's flock; a test swaps it to fail the way
// a filesystem can (ENOLCK, EIO).
var tryLockServe = (*flock.Flock).TryLock

// lockServe takes the data folder for this server process alone: an flock
// on DATA/serve.lock held until release. The lock file names the holder's
// pid, so that a second server can say who has the folder.
func lockServe(data string) (release func() error, err error) {
	return lockFolder(data, "serve.lock", "chatrelay serve", func(who string) string {
		return fmt.Sprintf("the data folder %s is served by %s: one folder serves one chatrelay serve (the host CLI may share it); to run several servers, share a Redis with --store redis://… instead", data, who)
	})
}

// LockPushSender takes the sending of the data folder's Web Push for
// this process alone, until release: an flock on DATA/push-send.lock,
// held by a server that sends its pushes itself and by chatrelay push
// send. A folder's claims of its pushes (the push journal) are the
// sender's, in its memory: two senders would send each push twice and
// drop each other's unsettled claims from the journal.
func LockPushSender(data, holder string) (release func() error, err error) {
	return lockFolder(data, "push-send.lock", holder, func(who string) string {
		return fmt.Sprintf("the data folder %s has its pushes sent by %s: one process sends a folder's pushes (chatrelay serve, or one chatrelay push send beside a serve --push-sender=process or external)", data, who)
	})
}

// lockFolder takes DATA/name's flock until release, and writes what
// holds it (holder, with the pid) in the file; taken already, it fails
// with held's message, given what the file says of its holder.
func lockFolder(data, name, holder string, held func(who string) string) (release func() error, err error) {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	path := filepath.Join(data, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	fl := newFlock(path)
	ok, err := tryLockServe(fl)
	if err != nil {
		// Not another server: the lock itself failed (ENOLCK on an NFS
		// without its lock daemon, EIO, EACCES …); say so, not "served by".
		f.Close()
		return nil, fmt.Errorf("store: cannot lock %s: %w", path, err)
	}
	if !ok {
		who, _ := os.ReadFile(path)
		f.Close()
		w := strings.TrimSpace(string(who))
		if w == "" {
			w = "another process"
		}
		return nil, errors.New(held(w))
	}
	// The pid goes in after the lock is ours, through f (the lock is on
	// fl's own descriptor of the same file).
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "%s (pid %d, since %s)\n", holder, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	}
	f.Close()
	return func() error {
		os.WriteFile(path, nil, 0o600) // the next holder writes its own pid
		return fl.Unlock()
	}, nil
}
