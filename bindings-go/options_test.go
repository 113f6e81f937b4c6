package ferrolock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
)

// The client options Go could not set before the C options grew them (drift, fence retention,
// subscription linger): each reaches the core, next to a control with the defaults.
func TestClientOptionsReachTheCore(t *testing.T) {
	url := startRedis(t)

	// Drift: a grant's validity is its lease less TTL × DriftFactor + DriftMin.
	remaining := func(opts *ferrolock.ClientOptions) time.Duration {
		l := newLock(t, connect(t, url, opts), "drift", lease(10*time.Second))
		h := acquire(t, l, time.Second)
		defer release(t, h)
		return h.Remaining()
	}
	if r := remaining(nil); r <= 9*time.Second {
		t.Fatalf("default drift: %v left of a 10 s lease", r)
	}
	if r := remaining(&ferrolock.ClientOptions{DriftFactor: 0.25}); r > 7500*time.Millisecond {
		t.Fatalf("DriftFactor 0.25: %v left of a 10 s lease", r)
	}
	if r := remaining(&ferrolock.ClientOptions{DriftMin: 3 * time.Second}); r > 6900*time.Millisecond {
		t.Fatalf("DriftMin 3 s: %v left of a 10 s lease", r)
	}

	// FenceRetention: the idle expiry of the lock's fence counter.
	fencePTTL := func(opts *ferrolock.ClientOptions, name string) int64 {
		l := newLock(t, connect(t, url, opts), name, lease(10*time.Second))
		release(t, acquire(t, l, time.Second))
		line := inlineLine(t, url, "PTTL ferrolock:{"+name+"}:fence")
		v, err := strconv.ParseInt(strings.TrimPrefix(line, ":"), 10, 64)
		if err != nil {
			t.Fatalf("PTTL: %q", line)
		}
		return v
	}
	if p := fencePTTL(nil, "retention-default"); p <= (24 * time.Hour).Milliseconds() {
		t.Fatalf("default fence retention: PTTL %d ms", p)
	}
	if p := fencePTTL(&ferrolock.ClientOptions{FenceRetention: 5 * time.Second}, "retention-5s"); p <= 0 || p > 5000 {
		t.Fatalf("FenceRetention 5 s: PTTL %d ms", p)
	}

	// SubscriptionLinger: how long the release channel stays subscribed after the last wait.
	subscribedAfterWait := func(opts *ferrolock.ClientOptions, name string) func() bool {
		holder := newLock(t, connect(t, url, nil), name, lease(10*time.Second))
		h := acquire(t, holder, time.Second)
		waiter := newLock(t, connect(t, url, opts), name, lease(10*time.Second))
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = h.Release(context.Background()) // the waiter's acquire below fails if it does
		}()
		release(t, acquire(t, waiter, 5*time.Second)) // waits on the channel
		return func() bool { return inlineLine(t, url, "PUBSUB CHANNELS ferrolock:{"+name+"}:released") == "*1" }
	}
	linger := subscribedAfterWait(&ferrolock.ClientOptions{SubscriptionLinger: 50 * time.Millisecond}, "linger-50ms")
	for t0 := time.Now(); linger(); time.Sleep(20 * time.Millisecond) {
		if time.Since(t0) > 3*time.Second {
			t.Fatal("SubscriptionLinger 50 ms: still subscribed after 3 s")
		}
	}
	dflt := subscribedAfterWait(nil, "linger-default")
	time.Sleep(500 * time.Millisecond)
	if !dflt() {
		t.Fatal("default linger (10 s): unsubscribed within 0.5 s")
	}
}
