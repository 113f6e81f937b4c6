// Command ferrolock-bench-go is bench/'s W1 driver for the Go binding (cgo over the C API, which
// runs the core's blocking facade). It prints one JSON object of raw measurements in the shape
// of the Rust, Python and Node drivers; bench/run.py computes every statistic.
//
//	ferrolock-bench-go w1 --url redis://127.0.0.1:6379 [--n 5000 --warmup 500 --reps 3]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
)

const ttl = 10 * time.Second

type rep struct {
	AcqNs       []int64 `json:"acq_ns"`
	RelNs       []int64 `json:"rel_ns"`
	WallNs      int64   `json:"wall_ns"`
	CPUNs       int64   `json:"cpu_ns"`
	CtxSwitches int64   `json:"ctx_switches"`
}

func rusage() (cpuNs, switches int64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano(), ru.Nvcsw + ru.Nivcsw
}

// totalCommands reads INFO stats' total_commands_processed over a plain RESP connection (the
// binding has no raw-command API, by design).
func totalCommands(redisURL string) (int64, error) {
	u, err := url.Parse(redisURL)
	if err != nil {
		return 0, err
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("INFO: unexpected reply %q (%v)", head, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0, err
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no total_commands_processed in INFO")
}

func w1(redisURL string, n, warmup, reps int, bounded bool) (map[string]any, error) {
	bg := context.Background()
	client, err := ferrolock.Connect(bg, redisURL, nil)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	lock, err := client.Lock("bench:w1:go", &ferrolock.LockOptions{TTL: ttl, Renew: ferrolock.RenewNever})
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	// The idiomatic call: a context bounding the wait (10 s, as every other driver) per acquire.
	pair := func() (time.Duration, time.Duration, error) {
		t0 := time.Now()
		ctx, cancel := bg, context.CancelFunc(func() {})
		if bounded {
			ctx, cancel = context.WithTimeout(bg, ttl)
		}
		held, err := lock.Acquire(ctx)
		cancel()
		if err != nil {
			return 0, 0, err
		}
		t1 := time.Now()
		err = held.Release(bg)
		held.Close()
		return t1.Sub(t0), time.Since(t1), err
	}
	for i := 0; i < warmup; i++ {
		if _, _, err := pair(); err != nil {
			return nil, err
		}
	}
	before, err := totalCommands(redisURL)
	if err != nil {
		return nil, err
	}
	out := []rep{}
	for k := 0; k < reps; k++ {
		r := rep{AcqNs: make([]int64, 0, n), RelNs: make([]int64, 0, n)}
		c0, x0 := rusage()
		w0 := time.Now()
		for i := 0; i < n; i++ {
			a, b, err := pair()
			if err != nil {
				return nil, err
			}
			r.AcqNs = append(r.AcqNs, a.Nanoseconds())
			r.RelNs = append(r.RelNs, b.Nanoseconds())
		}
		r.WallNs = time.Since(w0).Nanoseconds()
		c1, x1 := rusage()
		r.CPUNs, r.CtxSwitches = c1-c0, x1-x0
		out = append(out, r)
	}
	after, err := totalCommands(redisURL)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"ok": true, "lib_version": "0.1.0", "api": "Lock.Acquire(ctx with 10 s timeout) / Held.Release",
		// GOMAXPROCS: 1 when pinned to one CPU, which costs a processor handoff per blocking C call
		// (bench/README.md, "Where the time goes").
		"settings": map[string]any{"renew": "never", "ttl_ms": ttl.Milliseconds(), "gomaxprocs": runtime.GOMAXPROCS(0)},
		"runtime":  "Go (cgo) over the C API (the core's blocking facade)",
		"params":   map[string]any{"n": n, "warmup": warmup, "reps": reps, "ttl_ms": ttl.Milliseconds()},
		"reps":     out, "counters": map[string]any{"total_cmds": after - before - 1},
	}, nil
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "w1" {
		fmt.Fprintln(os.Stderr, "usage: ferrolock-bench-go w1 --url U [--n N --warmup W --reps R]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("w1", flag.ExitOnError)
	redisURL := fs.String("url", "redis://127.0.0.1:6379", "server")
	n := fs.Int("n", 5000, "pairs per repetition")
	warmup := fs.Int("warmup", 500, "warm-up pairs")
	reps := fs.Int("reps", 3, "repetitions")
	fs.String("lib", "ferrolock", "ignored (one library)")
	fs.String("config", "default", "ignored (one config)")
	wait := fs.String("wait", "ctx", "ctx: a context.WithTimeout(10 s) per acquire; none: context.Background()")
	_ = fs.Parse(os.Args[2:])
	res, err := w1(*redisURL, *n, *warmup, *reps, *wait != "none")
	if err != nil {
		res = map[string]any{"ok": false, "error": err.Error()}
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(res); err != nil {
		os.Exit(1)
	}
	if err != nil {
		os.Exit(1)
	}
}
