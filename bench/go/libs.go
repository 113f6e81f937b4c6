package main

// The libraries the Go driver measures, behind one small interface, so that every workload runs
// the same loop for each: ferrolock (the Go binding), redsync (the Go peer, over go-redis v9) and
// raw go-redis (SET NX PX + EVALSHA compare-and-delete: the floor a Go client can reach).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

const (
	ttl  = 10 * time.Second // every driver's lease
	wait = 10 * time.Second // every driver's bound on one acquire's wait
)

// locker is one worker's handle on the benchmark's lock name.
type locker interface {
	// acquire returns errBusy when the wait ended without the lock (contention, not a failure).
	acquire(ctx context.Context) error
	release(ctx context.Context) error
	close()
}

var errBusy = errors.New("not acquired within the wait")

type lib struct {
	version, api, runtime, client string
	settings                      map[string]any
	newLock                       func(name string) (locker, error)
	close                         func()
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "?"
}

func makeLib(ctx context.Context, name, config, url string) (*lib, error) {
	switch name {
	case "ferrolock":
		return ferrolockLib(ctx, url)
	case "redsync":
		return redsyncLib(ctx, config, url)
	case "raw":
		return rawLib(ctx, url)
	case "raw-scripts":
		return rawScriptsLib(ctx, url)
	}
	return nil, fmt.Errorf("unknown lib %q (ferrolock, redsync, raw, raw-scripts)", name)
}

// ---------------------------------------------------------------- ferrolock

type ferrolockLock struct {
	lock *ferrolock.Lock
	held *ferrolock.Held
}

func (l *ferrolockLock) acquire(ctx context.Context) error {
	h, err := l.lock.Acquire(ctx)
	if err != nil {
		if errors.Is(err, ferrolock.ErrAcquireTimeout) {
			return errBusy
		}
		return err
	}
	l.held = h
	return nil
}

func (l *ferrolockLock) release(ctx context.Context) error {
	err := l.held.Release(ctx)
	l.held.Close()
	l.held = nil
	return err
}

func (l *ferrolockLock) close() { l.lock.Close() }

func ferrolockLib(ctx context.Context, url string) (*lib, error) {
	client, err := ferrolock.Connect(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	return &lib{
		version: "0.1.0", api: "Lock.Acquire(ctx with 10 s timeout) / Held.Release",
		runtime: "Go (cgo) over the C API (the core's blocking facade)", client: "ferrolock core via the C API (cgo)",
		settings: map[string]any{"renew": "never", "ttl_ms": ttl.Milliseconds()},
		newLock: func(name string) (locker, error) {
			l, err := client.Lock(name, &ferrolock.LockOptions{TTL: ttl, Renew: ferrolock.RenewNever})
			if err != nil {
				return nil, err
			}
			return &ferrolockLock{lock: l}, nil
		},
		close: func() { client.Close() },
	}, nil
}

// ---------------------------------------------------------------- redsync

type redsyncLock struct{ m *redsync.Mutex }

func (l *redsyncLock) acquire(ctx context.Context) error {
	err := l.m.LockContext(ctx)
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken) {
		return errBusy
	}
	return err
}

func (l *redsyncLock) release(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock reached no quorum")
	}
	return err
}

func (l *redsyncLock) close() {}

// redsyncOptions: the lease, and enough tries for the 10 s context to bound the wait (redsync's
// default is 32 tries, about 5 s at its 50–250 ms delays). `tuned` retries every millisecond,
// as the tuned Node peers do (a zero delay would spin on the server).
func redsyncOptions(config string) ([]redsync.Option, map[string]any) {
	if config == "tuned" {
		return []redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(int(wait / time.Millisecond)),
				redsync.WithRetryDelay(time.Millisecond)},
			map[string]any{"expiry_ms": ttl.Milliseconds(), "retry_delay_ms": 1, "tries": int(wait / time.Millisecond)}
	}
	tries := int(wait / (50 * time.Millisecond))
	return []redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(tries)},
		map[string]any{"expiry_ms": ttl.Milliseconds(), "retry_delay_ms": "library default (50–250 random)", "tries": tries}
}

func redsyncLib(ctx context.Context, config, url string) (*lib, error) {
	rc, err := goRedis(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	rs := redsync.New(goredis.NewPool(rc))
	opts, settings := redsyncOptions(config)
	return &lib{
		version: moduleVersion("github.com/go-redsync/redsync/v4"), api: "Mutex.LockContext(ctx with 10 s timeout) / UnlockContext",
		runtime: "Go", client: "go-redis " + moduleVersion("github.com/redis/go-redis/v9"), settings: settings,
		newLock: func(name string) (locker, error) { return &redsyncLock{rs.NewMutex(name, opts...)}, nil },
		close:   func() { rc.Close() },
	}, nil
}

// goRedis opens a go-redis client on url, with `tune` applied to its options, and checks it.
func goRedis(ctx context.Context, url string, tune func(*goredislib.Options)) (*goredislib.Client, error) {
	o, err := goredislib.ParseURL(url)
	if err != nil {
		return nil, err
	}
	if tune != nil {
		tune(o)
	}
	rc := goredislib.NewClient(o)
	if err := rc.Ping(ctx).Err(); err != nil {
		rc.Close()
		return nil, err
	}
	return rc, nil
}

// ---------------------------------------------------------------- raw go-redis

const cad = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"

type rawLock struct {
	rc          *goredislib.Client
	script      *goredislib.Script
	name, token string
}

func (l *rawLock) acquire(ctx context.Context) error {
	ok, err := l.rc.SetNX(ctx, l.name, l.token, ttl).Result()
	if err == nil && !ok {
		return errBusy
	}
	return err
}

func (l *rawLock) release(ctx context.Context) error {
	return l.script.EvalSha(ctx, l.rc, []string{l.name}, l.token).Err()
}

func (l *rawLock) close() {}

func rawLib(ctx context.Context, url string) (*lib, error) {
	rc, err := goRedis(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	script := goredislib.NewScript(cad)
	if err := script.Load(ctx, rc).Err(); err != nil {
		rc.Close()
		return nil, err
	}
	return &lib{
		version: moduleVersion("github.com/redis/go-redis/v9"), api: "SetNX / Script.EvalSha", runtime: "Go",
		client:   "go-redis " + moduleVersion("github.com/redis/go-redis/v9"),
		settings: map[string]any{"acquire": "SET NX PX", "release": "EVALSHA compare-and-delete", "wait": "none"},
		newLock: func(name string) (locker, error) {
			b := make([]byte, 16)
			if _, err := rand.Read(b); err != nil {
				return nil, err
			}
			return &rawLock{rc: rc, script: script, name: name, token: hex.EncodeToString(b)}, nil
		},
		close: func() { rc.Close() },
	}, nil
}

// ---------------------------------------------------------------- raw go-redis, ferrolock's scripts

// The W1 pair of a ferrolock client sent by go-redis: the protocol's acquire (a fresh grant) and
// release (count 0) scripts with the arguments the core sends in W1. No waiting, no reentrancy
// bookkeeping: a reference for the server's share of a pair, as the Python and Node drivers have.
type rawScriptsLock struct {
	rc                  *goredislib.Client
	acq, rel            *goredislib.Script
	key, fence, channel string
	token               string
}

func (l *rawScriptsLock) acquire(ctx context.Context) error {
	r, err := l.acq.EvalSha(ctx, l.rc, []string{l.key, l.fence}, l.token, ttl.Milliseconds(),
		(7 * 24 * time.Hour).Milliseconds(), 1024).Slice()
	if err != nil {
		return err
	}
	if len(r) == 0 || r[0] != int64(1) {
		return errBusy
	}
	return nil
}

func (l *rawScriptsLock) release(ctx context.Context) error {
	return l.rel.EvalSha(ctx, l.rc, []string{l.key}, l.token, l.channel, "0").Err()
}

func (l *rawScriptsLock) close() {}

func rawScriptsLib(ctx context.Context, url string) (*lib, error) {
	// The driver runs from the repository's root (bench/run.py).
	src := func(f string) (*goredislib.Script, error) {
		b, err := os.ReadFile("core/scripts/" + f)
		return goredislib.NewScript(string(b)), err
	}
	acq, err := src("acquire.lua")
	if err != nil {
		return nil, err
	}
	rel, err := src("release.lua")
	if err != nil {
		return nil, err
	}
	rc, err := goRedis(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	for _, s := range []*goredislib.Script{acq, rel} {
		if err := s.Load(ctx, rc).Err(); err != nil {
			rc.Close()
			return nil, err
		}
	}
	return &lib{
		version: moduleVersion("github.com/redis/go-redis/v9"), api: "Script.EvalSha", runtime: "Go",
		client: "go-redis " + moduleVersion("github.com/redis/go-redis/v9"),
		settings: map[string]any{"acquire": "EVALSHA core/scripts/acquire.lua", "release": "EVALSHA core/scripts/release.lua",
			"wait": "none"},
		newLock: func(name string) (locker, error) {
			b := make([]byte, 16)
			if _, err := rand.Read(b); err != nil {
				return nil, err
			}
			key := "ferrolock:{" + name + "}"
			return &rawScriptsLock{rc: rc, acq: acq, rel: rel, key: key, fence: key + ":fence", channel: key + ":released",
				token: hex.EncodeToString(b)}, nil
		},
		close: func() { rc.Close() },
	}, nil
}
