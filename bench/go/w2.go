package main

// W2, contended handoff: `workers` goroutines of one process, each with its own lock handle on
// one name, acquire, hold `hold`, release, for `secs`. In forced mode a worker that has released
// waits until another worker has acquired. Raw events go to bench/run.py, as from the other
// drivers: [worker, acquire called, acquired, release called, released] in µs from the start.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// turns tells a worker in forced mode when another worker has acquired.
type turns struct {
	mu      sync.Mutex
	last    int
	changed chan struct{}
}

func (t *turns) announce(w int) {
	t.mu.Lock()
	t.last = w
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// awaitOther returns once a worker other than w holds the last grant, or at end.
func (t *turns) awaitOther(w int, end time.Time) {
	for {
		t.mu.Lock()
		last, ch := t.last, t.changed
		t.mu.Unlock()
		left := time.Until(end)
		if last != w || left <= 0 {
			return
		}
		timer := time.NewTimer(left)
		select {
		case <-ch:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func w2(redisURL, libName, config string, forced bool, workers int, secs, hold time.Duration) (map[string]any, error) {
	bg := context.Background()
	L, err := makeLib(bg, libName, config, redisURL)
	if err != nil {
		return nil, err
	}
	defer L.close()
	name := fmt.Sprintf("bench:w2:go:%s:%s:%v", libName, config, forced)
	locks := make([]locker, workers)
	for w := range locks {
		if locks[w], err = L.newLock(name); err != nil {
			return nil, err
		}
		defer locks[w].close()
	}
	before, err := totalCommands(redisURL)
	if err != nil {
		return nil, err
	}
	var (
		mu                 sync.Mutex
		events             [][5]float64
		timeouts, failures int
		firstError         error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if errors.Is(err, errBusy) {
			timeouts++
			return
		}
		failures++
		if firstError == nil {
			firstError = err
		}
	}
	events = [][5]float64{} // [] in the JSON when nothing was acquired
	t := &turns{last: -1, changed: make(chan struct{})}
	base := time.Now()
	end := base.Add(secs)
	us := func(x time.Time) float64 { return float64(x.Sub(base).Nanoseconds()) / 1e3 }
	c0, _ := rusage()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int, lk locker) {
			defer wg.Done()
			for time.Now().Before(end) {
				a0 := time.Now()
				ctx, cancel := context.WithTimeout(bg, wait)
				err := lk.acquire(ctx)
				cancel()
				if err != nil {
					fail(err)
					continue
				}
				a1 := time.Now()
				if forced {
					t.announce(w)
				}
				time.Sleep(hold)
				r0 := time.Now()
				if err := lk.release(bg); err != nil {
					fail(err)
				}
				r1 := time.Now()
				mu.Lock()
				events = append(events, [5]float64{float64(w), us(a0), us(a1), us(r0), us(r1)})
				mu.Unlock()
				if forced {
					t.awaitOther(w, end)
				}
			}
		}(w, locks[w])
	}
	wg.Wait()
	wall := time.Since(base)
	c1, _ := rusage()
	after, err := totalCommands(redisURL)
	if err != nil {
		return nil, err
	}
	var first any
	if firstError != nil {
		first = firstError.Error()
	}
	return map[string]any{
		"ok": true, "lib_version": L.version, "api": L.api, "settings": L.settings,
		"runtime": fmt.Sprintf("%s, %d goroutines (GOMAXPROCS %d), one client", L.runtime, workers, runtime.GOMAXPROCS(0)),
		"params": map[string]any{"workers": workers, "secs": secs.Seconds(), "hold_ms": hold.Seconds() * 1e3,
			"ttl_ms": ttl.Milliseconds(), "wait_ms": wait.Milliseconds()},
		"events": events, "timeouts": timeouts, "errors": failures, "first_error": first,
		"wall_ns": wall.Nanoseconds(), "cpu_ns": c1 - c0,
		"counters": map[string]any{"total_cmds": after - before - 1},
	}, nil
}
