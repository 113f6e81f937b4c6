package main

// W3: redsync's Redlock over 5 masters, with the last masters SIGSTOPped and resumed. Same
// phases and output shape as bench/src/w3.rs, py/bench.py w3 and node/bench.mjs w3.

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

var w3Phases = []struct {
	name     string
	stopped  int
	t100     bool // a 100 ms read/write timeout on each node's client
	resuming bool
}{
	{"healthy", 0, false, false},
	{"one_stopped_default", 1, false, false},
	{"one_stopped_t100", 1, true, false},
	{"two_stopped_t100", 2, true, false},
	{"after_resume", 0, false, true},
}

// callOrHang runs f, giving up on it (it goes on in its goroutine) after `hang`.
func callOrHang(hang time.Duration, f func() error) (took time.Duration, err error, hung bool) {
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- f() }()
	timer := time.NewTimer(hang)
	defer timer.Stop()
	select {
	case err := <-done:
		return time.Since(t0), err, false
	case <-timer.C:
		return 0, nil, true
	}
}

func w3(libName string, urls []string, pidList string, n int, phaseSecs, hang time.Duration) (map[string]any, error) {
	if libName != "redsync" {
		return nil, fmt.Errorf("W3 has no Go driver for %s (ferrolock's Redlock is measured by the Rust driver)", libName)
	}
	var pids []int
	for _, p := range strings.Split(pidList, ",") {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("--pids: %w", err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != len(urls) {
		return nil, fmt.Errorf("%d urls but %d pids", len(urls), len(pids))
	}
	bg := context.Background()
	// Two client sets, every connection made while all masters are up.
	clients := func(t100 bool) ([]redis.Pool, []*goredislib.Client, error) {
		var pools []redis.Pool
		var rcs []*goredislib.Client
		for _, u := range urls {
			rc, err := goRedis(bg, u, func(o *goredislib.Options) {
				if t100 {
					o.ReadTimeout, o.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
				}
			})
			if err != nil {
				return nil, nil, err
			}
			pools, rcs = append(pools, goredis.NewPool(rc)), append(rcs, rc)
		}
		return pools, rcs, nil
	}
	defaultPools, defaultRCs, err := clients(false)
	if err != nil {
		return nil, err
	}
	t100Pools, t100RCs, err := clients(true)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, rc := range append(defaultRCs, t100RCs...) {
			rc.Close()
		}
	}()
	phases := map[string]map[string]any{}
	var stopped []int
	baseline := map[int]int64{}
	defer func() {
		for _, i := range stopped {
			_ = syscall.Kill(pids[i], syscall.SIGCONT)
		}
	}()
	for _, ph := range w3Phases {
		for len(stopped) < ph.stopped {
			i := len(urls) - 1 - len(stopped)
			if baseline[i], err = totalCommands(urls[i]); err != nil {
				return nil, err
			}
			stopped = append(stopped, i)
			if err := syscall.Kill(pids[i], syscall.SIGSTOP); err != nil {
				return nil, err
			}
		}
		var late map[string]int64
		if ph.resuming && len(stopped) > 0 {
			for _, i := range stopped {
				_ = syscall.Kill(pids[i], syscall.SIGCONT)
			}
			time.Sleep(300 * time.Millisecond)
			late = map[string]int64{}
			for _, i := range stopped {
				total, err := totalCommands(urls[i])
				if err != nil {
					return nil, err
				}
				late[urls[i]] = total - baseline[i] - 1
			}
			stopped = nil
		}
		pools := defaultPools
		if ph.t100 {
			pools = t100Pools
		}
		// One attempt per acquire, as every W3 driver (the peers' retry loops off).
		m := redsync.New(pools...).NewMutex("bench:w3:go:redsync:"+ph.name, redsync.WithExpiry(ttl), redsync.WithTries(1))
		acq, rel := []int64{}, []int64{}
		failed, hung := 0, 0
		end := time.Now().Add(phaseSecs)
		for k := 0; k < n && time.Now().Before(end); k++ {
			took, err, h := callOrHang(hang, func() error { return m.LockContext(bg) })
			if h {
				hung++
				break
			}
			acq = append(acq, took.Nanoseconds())
			if err != nil {
				failed++
				continue
			}
			took, err, h = callOrHang(hang, func() error {
				ok, err := m.UnlockContext(bg)
				if err == nil && !ok {
					err = fmt.Errorf("unlock reached no quorum")
				}
				return err
			})
			if h {
				hung++
				break
			}
			rel = append(rel, took.Nanoseconds())
			if err != nil {
				failed++
			}
		}
		out := map[string]any{
			"n": len(acq), "completed": len(rel), "failed": failed, "hung": hung, "acq_ns": acq, "rel_ns": rel,
			"goroutines_alive_after": runtime.NumGoroutine(), // made relative below
		}
		if late != nil {
			out["late_cmds_on_resumed_nodes"] = late
		}
		phases[ph.name] = out
	}
	// Goroutines above the count after the healthy phase (go-redis's own settle while it runs).
	base := phases["healthy"]["goroutines_alive_after"].(int)
	for _, ph := range phases {
		ph["goroutines_alive_after"] = ph["goroutines_alive_after"].(int) - base
	}
	return map[string]any{
		"ok": true, "lib_version": moduleVersion("github.com/go-redsync/redsync/v4"),
		"api": "Mutex.LockContext / UnlockContext (WithTries(1))",
		"settings": map[string]any{
			"per_node_timeout_ms": "go-redis default (read/write 3 s) / 100 (t100); redsync's acquire context 5 % of the expiry",
			"attempts":            "one (WithTries(1))",
		},
		"runtime": "Go",
		"params": map[string]any{"n": n, "phase_secs": phaseSecs.Seconds(), "hang_s": hang.Seconds(),
			"masters": len(urls), "ttl_ms": ttl.Milliseconds()},
		"phases": phases,
	}, nil
}
