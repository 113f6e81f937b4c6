package ferrolock_test

// Client.Close (docs/GUARANTEES.md, "Closing a client"): a pending Acquire returns ErrClosed at
// once, live holds become lost and are left to expire with no renewal after the close, later
// calls return ErrClosed; the finalizer of a collected Client closes nothing.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
)

// monitor records every command the server runs (MONITOR) with the time it was read.
type monitor struct {
	mu    sync.Mutex
	lines []monitorLine
	conn  net.Conn
}

type monitorLine struct {
	at   time.Time
	line string
}

func startMonitor(t *testing.T, url string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "redis://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if ok, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(ok, "+OK") {
		t.Fatalf("MONITOR: %q %v", ok, err)
	}
	m := &monitor{conn: conn}
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, monitorLine{time.Now(), line})
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return m
}

// renewalsAfter counts renewals (the owner-checked extend: the hold key alone) of name run
// after since.
func (m *monitor) renewalsAfter(name string, since time.Time) int {
	key := fmt.Sprintf("\"ferrolock:{%s}\"", name)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, l := range m.lines {
		if l.at.After(since) && strings.Contains(l.line, "\"EVALSHA\"") && strings.Contains(l.line, key) &&
			!strings.Contains(l.line, ":fence") && !strings.Contains(l.line, ":released") {
			n++
		}
	}
	return n
}

func isHeld(t *testing.T, c *ferrolock.Client, name string) bool {
	t.Helper()
	info, err := c.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return info != nil
}

func TestCloseEndsAPendingAcquire(t *testing.T) {
	url := startRedis(t)
	admin := connect(t, url, nil)
	for _, closeIt := range []bool{true, false} {
		name := fmt.Sprintf("close-pending-%v", closeIt)
		held := acquire(t, newLock(t, admin, name, lease(30*time.Second)), time.Second)
		c := connect(t, url, nil)
		type result struct {
			err error
			at  time.Time
		}
		results := make(chan result, 2)
		for _, ctx := range []context.Context{context.Background(), longCtx(t)} {
			l := newLock(t, c, name, nil)
			go func() {
				h, err := l.Acquire(ctx)
				at := time.Now()
				if err == nil {
					_ = h.Release(context.Background()) // control: the next waiter's turn
					h.Close()
				}
				results <- result{err, at}
			}()
		}
		time.Sleep(300 * time.Millisecond)
		tClose := time.Now()
		if closeIt {
			c.Close()
		}
		time.Sleep(300 * time.Millisecond)
		release(t, held) // free: a live waiter would take it now
		for i := 0; i < 2; i++ {
			select {
			case r := <-results:
				if closeIt {
					if !errors.Is(r.err, ferrolock.ErrClosed) {
						t.Fatalf("pending Acquire after Close: %v, want ErrClosed", r.err)
					}
					if d := r.at.Sub(tClose); d > 200*time.Millisecond {
						t.Fatalf("the pending Acquire ended %v after Close", d)
					}
				} else if r.err != nil {
					t.Fatalf("control: the waiter was not granted: %v", r.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the pending Acquire did not end")
			}
		}
		if closeIt {
			time.Sleep(200 * time.Millisecond)
			if isHeld(t, admin, name) {
				t.Fatal("the closed client took the lock after Close")
			}
		}
	}
}

func longCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Close while held: lost at once (Lost(), Context()), no renewal after the close, left to expire.
// Control: a Client that is only dropped and collected (its finalizer frees the handle) keeps
// renewing its hold, which stays usable.
func TestCloseWhileHeldStopsRenewals(t *testing.T) {
	url := startRedis(t)
	mon := startMonitor(t, url)
	admin := connect(t, url, nil)
	for _, closeIt := range []bool{true, false} {
		name := fmt.Sprintf("close-held-%v", closeIt)
		c, err := ferrolock.Connect(context.Background(), url, &ferrolock.ClientOptions{WatchdogTTL: 600 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Lock(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		lost, ctx := h.Lost(), h.Context()
		time.Sleep(700 * time.Millisecond)
		if mon.renewalsAfter(name, time.Now().Add(-700*time.Millisecond)) < 1 {
			t.Fatal("no renewal seen before the close")
		}
		tClose := time.Now()
		if closeIt {
			c.Close()
			c.Close()
		} else {
			c = nil // control: only the finalizer runs
			for i := 0; i < 5; i++ {
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
			}
		}
		time.Sleep(1500 * time.Millisecond)
		renewals := mon.renewalsAfter(name, tClose.Add(20*time.Millisecond))
		if closeIt {
			if renewals != 0 {
				t.Fatalf("%d renewals reached the server after Close", renewals)
			}
			select {
			case <-lost:
			default:
				t.Fatal("Lost() not closed by Close")
			}
			if !errors.Is(context.Cause(ctx), ferrolock.ErrLost) {
				t.Fatalf("Context() cause %v, want ErrLost", context.Cause(ctx))
			}
			if h.State() != ferrolock.StateLost || h.Remaining() != 0 {
				t.Fatalf("after Close: %v, %v left", h.State(), h.Remaining())
			}
			if isHeld(t, admin, name) {
				t.Fatal("the hold was renewed after Close (its 600 ms lease should have run out)")
			}
		} else {
			if renewals < 2 {
				t.Fatalf("control: the check saw %d renewals of a live hold", renewals)
			}
			if h.State() != ferrolock.StateHeld {
				t.Fatalf("control: %v after the client was collected", h.State())
			}
			release(t, h)
		}
		h.Close()
		l.Close()
	}
}

func TestCallsAfterCloseReturnErrClosed(t *testing.T) {
	url := startRedis(t)
	admin := connect(t, url, nil)
	c := connect(t, url, nil)
	l := newLock(t, c, "close-after", lease(5*time.Second))
	h := acquire(t, l, time.Second)
	inner := acquire(t, l, time.Second)
	c.Close()
	ctx := context.Background()
	for what, err := range map[string]error{
		"Acquire":       only(l.Acquire(ctx)),
		"Acquire(ctx)":  only(l.Acquire(longCtx(t))),
		"TryAcquire":    only(l.TryAcquire(ctx)),
		"Release inner": inner.Release(ctx),
		"Extend":        h.Extend(ctx, time.Second),
		"Release":       h.Release(ctx),
		"Lock":          only(c.Lock("x", nil)),
		"Inspect":       only(c.Inspect(ctx, "x")),
	} {
		if !errors.Is(err, ferrolock.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	if err := h.Ensure(0); !errors.Is(err, ferrolock.ErrLost) {
		t.Errorf("Ensure after Close: %v, want ErrLost", err)
	}
	if h.State() != ferrolock.StateLost {
		t.Errorf("State after Close: %v", h.State())
	}
	if info, err := admin.Inspect(ctx, "close-after"); err != nil || info == nil || info.Count != 2 {
		t.Errorf("not released, left to its lease: %+v, %v", info, err)
	}
}

// A shutdown path: Release with the request's context, already cancelled, then Close of the
// Held or the whole Client at once. The release is sent all the same, and the lock is free.
// (Before, the release went to a goroutine that reached the library after the Close: the lock
// stayed held for its lease in most runs.) Control: Close with no Release leaves it held.
func TestReleaseWithADoneContextThenCloseFreesTheLock(t *testing.T) {
	url := startRedis(t)
	admin := connect(t, url, nil)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		what    string
		release bool
		close   func(*ferrolock.Client, *ferrolock.Held)
	}{
		{"Held.Close", true, func(_ *ferrolock.Client, h *ferrolock.Held) { h.Close() }},
		{"Client.Close", true, func(c *ferrolock.Client, _ *ferrolock.Held) { c.Close() }},
		{"control: no Release", false, func(c *ferrolock.Client, _ *ferrolock.Held) { c.Close() }},
	} {
		for i := 0; i < 10; i++ {
			name := fmt.Sprintf("release-done-ctx-%s-%d", tc.what, i)
			c := connect(t, url, nil)
			h := acquire(t, newLock(t, c, name, lease(30*time.Second)), time.Second)
			if tc.release {
				if err := h.Release(done); err != nil {
					t.Fatalf("%s: Release with a done context: %v", tc.what, err)
				}
			}
			tc.close(c, h)
			c.Close()
			info, err := admin.Inspect(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if held := info != nil; held == tc.release {
				t.Fatalf("%s, run %d: lock held after the close: %v (want %v)", tc.what, i, held, !tc.release)
			}
		}
	}
}

// Close from a goroutine woken by Lost(), and from several goroutines at once (run with -race).
func TestCloseFromLossAndFromManyGoroutines(t *testing.T) {
	url := startRedis(t)
	admin := connect(t, url, nil)
	c := connect(t, url, &ferrolock.ClientOptions{WatchdogTTL: 300 * time.Millisecond})
	h := acquire(t, newLock(t, c, "close-cb", nil), time.Second)
	done := make(chan struct{})
	go func() {
		<-h.Lost()
		c.Close()
		c.Close()
		close(done)
	}()
	if _, err := admin.ForceUnlock(context.Background(), "close-cb"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close after Lost() did not return")
	}

	c = connect(t, url, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		l := newLock(t, c, fmt.Sprintf("close-busy-%d", i%2), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				h, err := l.Acquire(ctx)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				_ = h.Release(context.Background())
				h.Close()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ferrolock.ErrClosed) {
			t.Errorf("acquire loop ended with %v, want ErrClosed", err)
		}
	}
}

// clients lists the server's client connections (CLIENT LIST), this look's own included.
func clients(t *testing.T, url string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "redis://"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("CLIENT LIST\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	n, aerr := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil || aerr != nil || !strings.HasPrefix(head, "$") {
		t.Fatalf("CLIENT LIST: %q %v", head, err)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(body)), "\n")
}

// A Connect that its ctx ends first returns at once, and the connection that arrives late is
// closed when it does: a server slow to answer must not keep a connection per timed-out Connect.
func TestALateConnectionIsClosed(t *testing.T) {
	url := startRedis(t)
	if reply := inlineLine(t, url, "CLIENT PAUSE 1000 ALL"); reply != "+OK" {
		t.Fatalf("CLIENT PAUSE: %q", reply)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := ferrolock.Connect(ctx, url, nil)
	took := time.Since(start)
	if c != nil || !errors.Is(err, ferrolock.ErrTimeout) || errors.Is(err, ferrolock.ErrAcquireTimeout) ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect to a paused server: %v, %v (want ErrTimeout wrapping the deadline)", c, err)
	}
	if took > 900*time.Millisecond {
		t.Fatalf("Connect returned %v after its 100 ms context", took)
	}
	// The first look waits for the pause to end, as the late connection's handshake does. Once
	// that connection is closed, the look is the server's only client.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		list := clients(t, url)
		if len(list) == 1 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the late connection was left open: %q", list)
		}
	}
}
