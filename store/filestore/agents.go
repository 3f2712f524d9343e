package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The agent keys live in one file of the chat folder, <data>/chat/agents.json
// (mode 0600), written as the thread documents are (under its .lock file,
// temp file, fsync, rename), newest key first:
//
//	{"version":1,"agents":[{"id":"a_…","name":…,"digest":…},…]}
//
// The folder's watch (feed.go) announces a change of it by any process.

const agentsFile = "agents.json"

type agentsDoc struct {
	Version int                  `json:"version"`
	Agents  []chatrelay.AgentKey `json:"agents"`
}

var _ store.Agents = (*File)(nil)

func (s *File) agentsPath() string { return filepath.Join(s.dir, agentsFile) }

// readAgents reads the keys (none if there is no file). A file that does
// not parse fails closed: every key is refused until an operator looks.
func (s *File) readAgents() ([]chatrelay.AgentKey, []byte, error) {
	data, err := s.readFile(s.agentsPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, s.unavailable(agentsFile, err)
	}
	var d agentsDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil || d.Version != 1 {
		s.log.Error("agent keys file does not parse; every agent key is refused", "file", s.agentsPath(), "err", err)
		return nil, data, &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the agent keys file does not parse", Err: fmt.Errorf("agents: %v (version %d)", err, d.Version)}
	}
	return d.Agents, data, nil
}

// withAgents runs fn on the keys under the file's locks and writes what
// it returns (if write).
func (s *File) withAgents(ctx context.Context, fn func([]chatrelay.AgentKey) ([]chatrelay.AgentKey, bool, error)) error {
	s.agentsMu.Lock()
	defer s.agentsMu.Unlock()
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return s.unavailable(agentsFile, err)
	}
	unlock, err := lockPath(ctx, s.agentsPath()+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return err
	}
	defer unlock()
	keys, _, err := s.readAgents()
	if err != nil {
		return err
	}
	out, write, err := fn(keys)
	if err != nil || !write {
		return err
	}
	b := agentsRecord(out)
	var prev []byte
	if len(keys) > 0 {
		prev = agentsRecord(keys)
	}
	if err := s.replaceRecord(s.dir, agentsFile, b, prev, s.dsync); err != nil {
		return s.unavailable(agentsFile, err)
	}
	s.announceAgents(b)
	return nil
}

// agentsRecord is the agent keys' record holding keys.
func agentsRecord(keys []chatrelay.AgentKey) []byte {
	b, _ := json.Marshal(agentsDoc{Version: 1, Agents: keys})
	return append(b, '\n')
}

// AddAgent implements store.Agents.
func (s *File) AddAgent(ctx context.Context, k chatrelay.AgentKey) error {
	if err := k.Check(); err != nil {
		return err
	}
	return s.withAgents(ctx, func(keys []chatrelay.AgentKey) ([]chatrelay.AgentKey, bool, error) {
		active := 0
		for _, o := range keys {
			if o.ID == k.ID || o.Digest == k.Digest {
				return nil, false, chatrelay.Errorf(chatrelay.ClientIDConflict, "an agent key with this id or digest is already stored")
			}
			if o.Active() {
				active++
			}
		}
		if active >= chatrelay.LimitActiveAgents.Max {
			return nil, false, chatrelay.ActiveAgentsRefusal()
		}
		return append([]chatrelay.AgentKey{k}, keys...), true, nil
	})
}

// AgentKeys implements store.Agents.
func (s *File) AgentKeys(context.Context) ([]chatrelay.AgentKey, error) {
	keys, _, err := s.readAgents()
	return keys, err
}

// RevokeAgent implements store.Agents.
func (s *File) RevokeAgent(ctx context.Context, id string) (chatrelay.AgentKey, error) {
	var got chatrelay.AgentKey
	err := s.withAgents(ctx, func(keys []chatrelay.AgentKey) ([]chatrelay.AgentKey, bool, error) {
		for i := range keys {
			if keys[i].ID != id {
				continue
			}
			write := keys[i].RevokedAt == 0
			if write {
				keys[i].RevokedAt = s.now().UnixMilli()
			}
			got = keys[i]
			return keys, write, nil
		}
		return nil, false, chatrelay.Errorf(chatrelay.NotFound, "no agent key %q", id)
	})
	return got, err
}

// ResolveAgent implements store.Agents.
func (s *File) ResolveAgent(_ context.Context, digest string) (chatrelay.AgentKey, error) {
	keys, _, err := s.readAgents()
	if err != nil {
		return chatrelay.AgentKey{}, err
	}
	return store.FindAgent(keys, digest)
}

// pokeAgents announces a change of the keys file by another process (or
// one the watch saw late): bytes other than those last announced.
func (s *File) pokeAgents() {
	data, err := s.readFile(s.agentsPath())
	if err != nil {
		return
	}
	s.announceAgents(data)
}

// announceAgents hands the feeds a batch saying the keys changed, once per
// content of the file.
func (s *File) announceAgents(data []byte) {
	sum := maphash.Bytes(docSeed, data)
	if s.agentsSeen.Swap(sum) == sum {
		return
	}
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	for f := range s.feeds {
		f.fn(store.Batch{Thread: store.AgentsTopic, Agents: true})
	}
}
