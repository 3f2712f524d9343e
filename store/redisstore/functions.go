package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The scripts of a post (appendScript, takeScript) are also functions of
// a Redis Functions library (Redis 7.0): FUNCTION LOAD compiles the
// library once, with its helpers (luaHelpers, luaRate) defined once, and
// each post is an FCALL of its function. As a script, the same Lua builds
// every helper's closure and the key table K again on every EVALSHA: 7 %
// of the instructions redis-server runs for a post (docs/performance-log.md,
// "Redis: functions and flatter Lua").
//
// The library's name and its functions' carry a hash of its code, so
// that nodes of two versions sharing one Redis each call their own (as
// EVALSHA does by the script's SHA-1); an old version's library stays
// loaded (18 kB of Lua). Open loads it (on every primary of a Redis Cluster:
// FUNCTION LOAD is not routed by key); a call that finds it missing (a
// restart without persistence, FUNCTION FLUSH, a primary added to a
// cluster) loads it again and is sent again: the function did not run.
// Redis before 7.0 has no FUNCTION: the store then runs the scripts with
// EVALSHA, as it did before (Redis 6.2 is still supported); so does a
// store whose Redis lost the library and then refused to load it again
// (sendOne).

// luaScript is a script the store runs: with EVALSHA (Script), or as
// the library's function fn when the store uses the library.
type luaScript struct {
	*redis.Script
	fn   string // the function's short name in the library
	name string // the function's full name, the library's prefix + fn (set by init)
	defs string // the script's own local functions, which the library defines once
	body string // the script's own Lua, after its prelude and defs
	fill string // the Lua that fills K from the call's keys (luaKeysFill, luaAppendKeysFill), if the prelude has K
}

// libScripts are the scripts that are functions of the library, in the
// order the library defines them.
var libScripts []*luaScript

// newLuaScript is the script prelude + defs + body, and the library's
// function name. prelude is luaRate, luaCommon + luaRate or luaAppendK +
// luaHelpers + luaRate: the library defines the helpers once, and defs
// once, and fills K as the prelude does.
func newLuaScript(name, prelude, defs, body string) *luaScript {
	fill := ""
	switch prelude {
	case luaRate:
	case luaCommon + luaRate:
		fill = luaKeysFill
	case luaAppendK + luaHelpers + luaRate:
		fill = luaAppendKeysFill
	default:
		panic("redisstore: a library function's prelude is luaRate, luaCommon+luaRate or luaAppendK+luaHelpers+luaRate")
	}
	ls := &luaScript{Script: redis.NewScript(prelude + defs + body), fn: name, defs: defs, body: body, fill: fill}
	libScripts = append(libScripts, ls)
	return ls
}

// libraryPlaceholder stands for the functions' prefix in the code the
// library's name is the hash of.
const libraryPlaceholder = "chatrelay_@_"

// library is the library's code and the prefix of its functions' names,
// "chatrelay_<hash>_".
var library = sync.OnceValues(func() (code, prefix string) {
	var b strings.Builder
	b.WriteString("local KEYS, ARGV\nlocal K = {}\nlocal inLibrary = true\n")
	b.WriteString(luaHelpers)
	b.WriteString(luaRate)
	for _, ls := range libScripts {
		b.WriteString(ls.defs)
	}
	for _, ls := range libScripts {
		b.WriteString("local function f_" + ls.fn + "()\n" + ls.body + "\nend\n")
	}
	for _, ls := range libScripts {
		b.WriteString("redis.register_function{function_name = '" + libraryPlaceholder + ls.fn + "', flags = {'allow-cross-slot-keys'},\n" +
			"  callback = function(keys, args)\n  KEYS, ARGV = keys, args" + ls.fill + "  return f_" + ls.fn + "()\nend}\n")
	}
	// The name is the hash of all of the code but the names (the
	// registrations' keys fill too).
	sum := sha1.Sum([]byte(b.String()))
	name := "chatrelay_" + hex.EncodeToString(sum[:6])
	prefix = name + "_"
	return "#!lua name=" + name + "\n" + strings.ReplaceAll(b.String(), libraryPlaceholder, prefix), prefix
})

// init names the library's functions once (their prefix is a hash of
// the whole library, known once every script is defined): a call sends
// its name as it is, with no string built per post.
func init() {
	_, prefix := library()
	for _, ls := range libScripts {
		ls.name = prefix + ls.fn
	}
}

// loadLibrary loads the library on rdb, on each primary of a cluster.
// The store is to use it if both results are nil. refused is Redis's
// answer if it would not load it (before 7.0: no FUNCTION; an ACL
// without it; out of memory): the store then runs the scripts with
// EVALSHA. err is a Redis that could not be reached.
func loadLibrary(ctx context.Context, rdb redis.UniversalClient) (refused, err error) {
	code, _ := library()
	load := func(ctx context.Context, c *redis.Client) error {
		return c.FunctionLoadReplace(ctx, code).Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, load)
	} else {
		err = rdb.FunctionLoadReplace(ctx, code).Err()
	}
	var re redis.Error
	if errors.As(err, &re) {
		return err, nil
	}
	return nil, err
}

// isNoFunction reports whether err is Redis's answer to an FCALL of a
// function it does not have.
func isNoFunction(err error) bool {
	if err == nil { // before re: errors.As makes it escape, an allocation a call
		return false
	}
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "Function not found")
}

// caller is a client or a pipeline.
type caller interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// call sends one call of ls on c: an FCALL if the store uses the library,
// else EVALSHA (EVAL once if Redis does not have the script).
func (s *Store) call(ctx context.Context, c caller, ls *luaScript, keys []string, args ...any) *redis.Cmd {
	if !s.fcall.Load() {
		return ls.Run(ctx, c, keys, args...)
	}
	cmd := redis.NewCmd(ctx, fcallArgs(ls, keys, args)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // as go-redis's FCall: a cluster routes by the first key
	}
	_ = c.Process(ctx, cmd)
	return cmd
}

// fcallArgs is the command FCALL <name> <numkeys> <keys...> <args...>,
// as go-redis's FCall sends it, byte for byte. Its names and keys are
// pointers into ls and keys (go-redis writes a *string as the string):
// boxed as values, each string would be an allocation of its own, the 14
// to 16 keys of an append and the name a quarter of a post's allocations
// in the server (docs/performance-log.md, "Redis: the client's work per post").
func fcallArgs(ls *luaScript, keys []string, args []any) []any {
	a := make([]any, 3+len(keys)+len(args))
	a[0], a[1], a[2] = "fcall", &ls.name, len(keys)
	for i := range keys {
		a[3+i] = &keys[i]
	}
	copy(a[3+len(keys):], args)
	return a
}

// argText is a command's argument as go-redis writes it, if it is a
// string or a *string; "" otherwise.
func argText(a any) string {
	switch a := a.(type) {
	case string:
		return a
	case *string:
		if a != nil {
			return *a
		}
	}
	return ""
}

// sendOne sends ls alone (its first sending, or again after Redis had
// neither the script nor the function), loading what Redis lacked. A
// Redis that lost the library and refuses to load it again (a failover
// to a server without FUNCTION, an ACL without it) turns the store to
// EVALSHA for the rest of its life (on a cluster, every shard's), as a
// refusal at open does; the call is then sent as a script.
func (s *Store) sendOne(ctx context.Context, ls *luaScript, keys []string, args ...any) *redis.Cmd {
	cmd := s.call(ctx, s.rdb, ls, keys, args...)
	// The answer, not s.fcall, says the call was an FCALL: another call
	// may have turned the store to EVALSHA since.
	if isNoFunction(cmd.Err()) {
		if s.fcall.Load() {
			refused, err := loadLibrary(ctx, s.rdb)
			if refused != nil && s.fcall.CompareAndSwap(true, false) {
				s.log.Warn("redis: the library of functions was lost and its load refused; posts run as scripts (EVALSHA) from now on", "err", refused)
			}
			if err != nil {
				// A primary that did not answer: the call fails again if
				// it is the one that lacks the library.
				s.log.Warn("redis: the library of functions could not be loaded on every primary", "err", err)
			}
		}
		cmd = s.call(ctx, s.rdb, ls, keys, args...)
	}
	return cmd
}
