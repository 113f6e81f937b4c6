// Command ferrolock-bench-go is bench/'s Go driver: the Go binding (cgo over the C API, which
// runs the core's blocking facade), the Go peer redsync and raw go-redis. It prints one JSON
// object of raw measurements in the shape of the Rust, Python and Node drivers; bench/run.py
// computes every statistic.
//
//	ferrolock-bench-go w1 --lib ferrolock|redsync|raw --config default|tuned --url U [--n 5000 --warmup 500 --reps 3]
//	ferrolock-bench-go w2 --lib ferrolock|redsync --config C --url U --mode any|forced [--workers 8 --secs 10 --hold-ms 1]
//	ferrolock-bench-go w3 --lib redsync --urls U1,..,U5 --pids P1,..,P5 [--n 2000 --phase-secs 8 --hang-s 3]
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
)

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

func w1(redisURL, libName, config string, n, warmup, reps int, bounded bool) (map[string]any, error) {
	bg := context.Background()
	L, err := makeLib(bg, libName, config, redisURL)
	if err != nil {
		return nil, err
	}
	defer L.close()
	lock, err := L.newLock("bench:w1:go:" + libName)
	if err != nil {
		return nil, err
	}
	defer lock.close()
	// The idiomatic call: a context bounding the wait (10 s, as every other driver) per acquire.
	pair := func() (time.Duration, time.Duration, error) {
		t0 := time.Now()
		ctx, cancel := bg, context.CancelFunc(func() {})
		if bounded {
			ctx, cancel = context.WithTimeout(bg, wait)
		}
		err := lock.acquire(ctx)
		cancel()
		if err != nil {
			return 0, 0, err
		}
		t1 := time.Now()
		err = lock.release(bg)
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
	settings := map[string]any{}
	for k, v := range L.settings {
		settings[k] = v
	}
	// GOMAXPROCS: 1 when pinned to one CPU, which costs a processor handoff per blocking C call
	// (bench/README.md, "Where the time goes").
	settings["gomaxprocs"] = runtime.GOMAXPROCS(0)
	return map[string]any{
		"ok": true, "lib_version": L.version, "api": L.api, "settings": settings, "runtime": L.runtime,
		"params": map[string]any{"n": n, "warmup": warmup, "reps": reps, "ttl_ms": ttl.Milliseconds()},
		"reps":   out, "counters": map[string]any{"total_cmds": after - before - 1},
	}, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ferrolock-bench-go w1|w2|w3 --lib L [options] (see the file's header)")
		os.Exit(2)
	}
	workload := os.Args[1]
	fs := flag.NewFlagSet(workload, flag.ExitOnError)
	redisURL := fs.String("url", "redis://127.0.0.1:6379", "server")
	libName := fs.String("lib", "ferrolock", "ferrolock, redsync or raw")
	config := fs.String("config", "default", "default or tuned (redsync's retry delay)")
	n := fs.Int("n", 5000, "W1: pairs per repetition; W3: pairs per phase at most")
	warmup := fs.Int("warmup", 500, "W1: warm-up pairs")
	reps := fs.Int("reps", 3, "W1: repetitions")
	waitMode := fs.String("wait", "ctx", "W1: ctx, a context.WithTimeout(10 s) per acquire; none, context.Background()")
	mode := fs.String("mode", "any", "W2: any or forced")
	workers := fs.Int("workers", 8, "W2: goroutines, each with its own lock handle")
	secs := fs.Float64("secs", 10, "W2: seconds")
	holdMs := fs.Float64("hold-ms", 1, "W2: time held")
	urls := fs.String("urls", "", "W3: the masters")
	pids := fs.String("pids", "", "W3: their process ids (SIGSTOP/SIGCONT)")
	phaseSecs := fs.Float64("phase-secs", 8, "W3: seconds per phase at most")
	hangS := fs.Float64("hang-s", 3, "W3: a call slower than this counts as hung and ends its phase")
	_ = fs.Parse(os.Args[2:])
	var res map[string]any
	var err error
	switch workload {
	case "w1":
		res, err = w1(*redisURL, *libName, *config, *n, *warmup, *reps, *waitMode != "none")
	case "w2":
		res, err = w2(*redisURL, *libName, *config, *mode == "forced", *workers, seconds(*secs), seconds(*holdMs/1000))
	case "w3":
		res, err = w3(*libName, strings.Split(*urls, ","), *pids, *n, seconds(*phaseSecs), seconds(*hangS))
	default:
		err = fmt.Errorf("unknown workload %q", workload)
	}
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

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
