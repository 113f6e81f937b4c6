// The Go demo worker (protocol: examples/README.md): acquire the shared lock, do a fenced
// read-modify-write of the resource's counter, release, print one JSON line per iteration.
//
//	worker --redis URL --resource HOST:PORT --name LOCK --iterations N --id ID
package main

/*
#include <time.h>
static unsigned long long monotonic_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
*/
import "C"

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
)

// monotonicNs is CLOCK_MONOTONIC in ns, comparable with the other languages' workers.
func monotonicNs() uint64 { return uint64(C.monotonic_ns()) }

func main() {
	redis := flag.String("redis", "", "Redis URL")
	resource := flag.String("resource", "", "fenced resource HOST:PORT")
	name := flag.String("name", "", "lock name")
	iterations := flag.Int("iterations", 0, "critical sections to run")
	id := flag.String("id", "", "worker id")
	flag.Parse()
	if err := run(*redis, *resource, *name, *iterations, *id); err != nil {
		fmt.Fprintf(os.Stderr, "worker %s: %v\n", *id, err)
		os.Exit(1)
	}
}

func run(redis, resource, name string, iterations int, id string) error {
	ctx := context.Background()
	client, err := ferrolock.Connect(ctx, redis, nil)
	if err != nil {
		return err
	}
	defer client.Close()
	lock, err := client.Lock(name, nil) // no explicit lease: watchdog-renewed
	if err != nil {
		return err
	}
	defer lock.Close()
	conn, err := net.Dial("tcp", resource)
	if err != nil {
		return err
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	call := func(req string) (string, error) {
		if _, err := fmt.Fprintf(conn, "%s\n", req); err != nil {
			return "", err
		}
		line, err := r.ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err
	}
	for i := 0; i < iterations; i++ {
		wait, cancel := context.WithTimeout(ctx, 60*time.Second)
		held, err := lock.Acquire(wait)
		cancel()
		if err != nil {
			return err
		}
		acquired := monotonicNs()
		fence := held.Fence()
		rejected := true
		reply, err := call(fmt.Sprintf("READ %d", fence))
		if err != nil {
			return err
		}
		if v, ok := strings.CutPrefix(reply, "OK "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			if reply, err = call(fmt.Sprintf("WRITE %d %d", fence, n+1)); err != nil {
				return err
			}
			rejected = reply != "OK"
		}
		released := monotonicNs()
		if err := held.Release(ctx); err != nil {
			return err
		}
		held.Close()
		fmt.Printf("{\"id\":%q,\"lang\":\"go\",\"fence\":%d,\"acquired_ns\":%d,\"released_ns\":%d,\"rejected\":%t}\n",
			id, fence, acquired, released, rejected)
	}
	return nil
}
