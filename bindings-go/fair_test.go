package ferrolock_test

import (
	"bufio"
	"context"
	"errors"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
)

// inlineInt sends one inline command and parses an integer reply (":n").
func inlineInt(t *testing.T, url, cmd string) int {
	t.Helper()
	line := inlineLine(t, url, cmd)
	if !strings.HasPrefix(line, ":") {
		t.Fatalf("%s: %q", cmd, line)
	}
	n, _ := strconv.Atoi(line[1:])
	return n
}

// inlineLine sends one inline command and returns the first reply line.
func inlineLine(t *testing.T, url, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "redis://"), time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return strings.TrimSpace(line)
}

// Fair mode: goroutines with a client each get the lock in arrival order, and fair mode is
// refused on a Redlock client.
func TestFairModeServesInArrivalOrder(t *testing.T) {
	url := startRedis(t)
	fair := &ferrolock.LockOptions{TTL: 10 * time.Second, Renew: ferrolock.RenewNever, Fair: true}
	holder := newLock(t, connect(t, url, nil), "fair", fair)
	h := acquire(t, holder, time.Second)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		l := newLock(t, connect(t, url, nil), "fair", fair)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			g, err := l.Acquire(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			if err := g.Release(context.Background()); err != nil {
				t.Errorf("release %d: %v", i, err)
			}
			g.Close()
		}(i)
		deadline := time.Now().Add(5 * time.Second)
		for inlineInt(t, url, "LLEN ferrolock:{fair}:queue") != i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	release(t, h)
	wg.Wait()
	if len(order) != 4 || order[0] != 0 || order[1] != 1 || order[2] != 2 || order[3] != 3 {
		t.Fatalf("grants out of arrival order: %v", order)
	}

	rl, err := ferrolock.ConnectRedlock(context.Background(), []string{url}, nil)
	if err != nil {
		t.Fatalf("redlock: %v", err)
	}
	defer rl.Close()
	if _, err := rl.Lock("fair", fair); !errors.Is(err, ferrolock.ErrInvalidConfig) {
		t.Fatalf("fair on Redlock: %v, want ErrInvalidConfig", err)
	}
	l, err := rl.Lock("fair", lease(10*time.Second)) // control
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	l.Close()
}

// NoPrefix gives the keys other languages get with an empty prefix ("{name}"), which Prefix ""
// cannot ask for (it means the default): a Go client then contends with theirs.
func TestNoPrefixUsesBareKeys(t *testing.T) {
	url := startRedis(t)
	c := connect(t, url, &ferrolock.ClientOptions{NoPrefix: true})
	h := acquire(t, newLock(t, c, "bare", lease(5*time.Second)), time.Second)
	if n := inlineInt(t, url, "EXISTS {bare}"); n != 1 {
		t.Fatalf("EXISTS {bare} = %d: the hold is not under the bare key", n)
	}
	if n := inlineInt(t, url, "EXISTS ferrolock:{bare}"); n != 0 {
		t.Fatalf("the default prefix was used")
	}
	release(t, h)
}

// Inspect reports the holder's token, count, fence and lease; nil when free.
func TestInspect(t *testing.T) {
	url := startRedis(t)
	c := connect(t, url, nil)
	ctx := context.Background()
	if info, err := c.Inspect(ctx, "seen"); err != nil || info != nil {
		t.Fatalf("free lock: %+v, %v", info, err)
	}
	l := newLock(t, c, "seen", lease(5*time.Second))
	h := acquire(t, l, time.Second)
	h2 := acquire(t, l, time.Second)
	info, err := c.Inspect(ctx, "seen")
	if err != nil || info == nil {
		t.Fatalf("held lock: %+v, %v", info, err)
	}
	if info.Count != 2 || info.Fence != h.Fence() || len(info.Owner) != 32 || info.TTL <= 0 || info.TTL > 5*time.Second {
		t.Fatalf("unexpected %+v (fence %d)", info, h.Fence())
	}
	if _, err := c.Inspect(ctx, ""); !errors.Is(err, ferrolock.ErrInvalidName) {
		t.Fatalf("empty name: %v", err)
	}
	release(t, h2)
	release(t, h)
	// An expiry beyond time.Duration's ~292 years (set by someone else) reads as the longest
	// Duration, not as a negative "no expiry" (it overflowed).
	inlineInt(t, url, "HSET ferrolock:{far} owner x count 1 fence 7")
	inlineInt(t, url, "PEXPIRE ferrolock:{far} 12614400000000") // 400 years
	if info, err := c.Inspect(ctx, "far"); err != nil || info == nil || info.TTL != math.MaxInt64 {
		t.Fatalf("far expiry: %+v, %v", info, err)
	}
	// A hold without any expiry (set by someone else) reads as a negative TTL, "no expiry".
	inlineInt(t, url, "HSET ferrolock:{forever} owner x count 1 fence 7")
	if info, err := c.Inspect(ctx, "forever"); err != nil || info == nil || info.TTL >= 0 {
		t.Fatalf("no expiry: %+v, %v (want a negative TTL)", info, err)
	}
	var nilClient *ferrolock.Client
	if _, err := nilClient.Inspect(ctx, "seen"); !errors.Is(err, ferrolock.ErrClosed) {
		t.Fatalf("nil client: %v", err)
	}
}

// ForceUnlock reports whether anything was held: true for a hold (deleted), false for a free name
// (then and right after the deletion).
func TestForceUnlockReportsWhetherItWasHeld(t *testing.T) {
	url := startRedis(t)
	c := connect(t, url, nil)
	ctx := context.Background()
	if was, err := c.ForceUnlock(ctx, "fu-free"); err != nil || was {
		t.Fatalf("ForceUnlock of a free name: %v, %v (want false)", was, err)
	}
	h := acquire(t, newLock(t, c, "fu-free", lease(10*time.Second)), time.Second)
	if was, err := c.ForceUnlock(ctx, "fu-free"); err != nil || !was {
		t.Fatalf("ForceUnlock of a held name: %v, %v (want true)", was, err)
	}
	if was, err := c.ForceUnlock(ctx, "fu-free"); err != nil || was {
		t.Fatalf("a second ForceUnlock: %v, %v (want false)", was, err)
	}
	if err := h.Release(ctx); !errors.Is(err, ferrolock.ErrLost) {
		t.Fatalf("release after ForceUnlock: %v, want ErrLost", err)
	}
}
