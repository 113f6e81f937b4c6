package ferrolock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	ferrolock "github.com/ferrolock/ferrolock/bindings-go"
)

// only returns err, or an error of its own if a handle came back together with a failure (a
// failed call must not hand anything out).
func only[T any](v *T, err error) error {
	if err != nil && v != nil {
		return fmt.Errorf("returned %T together with the error %v", v, err)
	}
	return err
}

// callNoPanic runs call, turning a panic into a test failure.
func callNoPanic(t *testing.T, call func(*testing.T) error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("panicked: %v", p)
		}
	}()
	return call(t)
}

// The bad-input matrix of shared/RELIABILITY.md ("Bad input across every binding"), one row per
// bad input. Every row runs against the same fixture: mine holds "matrix" (depth 1, a known fence)
// and rival, another Lock for the same name, contends. Each row asserts its typed error (errors.Is
// and Code, and a message starting with the code's name; want 0 marks a documented allow), that
// it did not panic, and that nothing was lost: mine's hold is still held with the same fence and
// depth 1, and rival still cannot take the lock.
// Not rows, by Go's types: NaN TTLs (time.Duration is an int64), NULL pointers (no nil handle can
// be made; closed handles are the equivalent), lone surrogates (names are byte strings).
func TestBadInputMatrix(t *testing.T) {
	url := startRedis(t)
	ctx := context.Background()
	c := connect(t, url, &ferrolock.ClientOptions{MaxNameLen: 16, MaxReentrancy: 2})
	dflt := connect(t, url, nil) // the default name cap, 64 KiB
	mine := newLock(t, c, "matrix", lease(10*time.Second))
	rival := newLock(t, c, "matrix", lease(10*time.Second))
	releasedRival := acquire(t, rival, time.Second)
	release(t, releasedRival)
	releasedMine := acquire(t, mine, time.Second) // an earlier hold of the handle that holds now
	release(t, releasedMine)
	held := acquire(t, mine, time.Second)
	fence := held.Fence()

	closedClient := connect(t, url, nil)
	closedClient.Close()
	closedClient.Close()
	closedLock := newLock(t, c, "matrix-closed", lease(5*time.Second))
	closedHeld := acquire(t, closedLock, time.Second)
	release(t, closedHeld)
	closedHeld.Close()
	closedHeld.Close()
	closedLock.Close()
	closedLock.Close()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()

	connectWith := func(u string, o *ferrolock.ClientOptions) func(t *testing.T) error {
		return func(t *testing.T) error { return only(ferrolock.Connect(ctx, u, o)) }
	}
	lockWith := func(name string, o *ferrolock.LockOptions) func(t *testing.T) error {
		return func(t *testing.T) error { return only(c.Lock(name, o)) }
	}
	bigName := strings.Repeat("k", 1<<20)

	rows := []struct {
		name string
		want ferrolock.ErrorCode // 0: a documented allow, no error
		call func(t *testing.T) error
	}{
		// Malformed URLs, interior NUL, unknown schemes.
		{"Connect(empty URL)", ferrolock.ErrInvalidURL, connectWith("", nil)},
		{"Connect(http://)", ferrolock.ErrInvalidURL, connectWith("http://127.0.0.1", nil)},
		{"Connect(NUL inside the URL)", ferrolock.ErrInvalidURL, connectWith("redis://a\x00b", nil)},
		{"Connect(invalid UTF-8 URL)", ferrolock.ErrInvalidURL, connectWith("redis://\xff", nil)},
		{"Connect(sentinel URL without a master name)", ferrolock.ErrInvalidURL, connectWith("redis+sentinel://127.0.0.1:1", nil)},
		{"Connect(redis+cluster://…/0)", ferrolock.ErrInvalidURL, connectWith("redis+cluster://127.0.0.1:1/0", nil)},
		// Client options.
		{"Connect(rediss://, unreadable CA file)", ferrolock.ErrInvalidConfig, connectWith("rediss://localhost:1", &ferrolock.ClientOptions{TLSCAFile: "/nonexistent/ca.crt"})},
		{"Connect(rediss://, certificate without key)", ferrolock.ErrInvalidConfig, connectWith("rediss://localhost:1", &ferrolock.ClientOptions{TLSCertFile: "client.crt"})},
		{"Connect(prefix with '{')", ferrolock.ErrInvalidConfig, connectWith(url, &ferrolock.ClientOptions{Prefix: "a{b"})},
		{"Connect(NoPrefix with a prefix)", ferrolock.ErrInvalidConfig, connectWith(url, &ferrolock.ClientOptions{Prefix: "p:", NoPrefix: true})},
		{"Connect(ResponseTimeout negative)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{ResponseTimeout: -time.Second})},
		{"Connect(ConnectTimeout negative)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{ConnectTimeout: -1})},
		{"Connect(MaxNameLen negative)", ferrolock.ErrInvalidConfig, connectWith(url, &ferrolock.ClientOptions{MaxNameLen: -1})},
		{"Connect(prefix not UTF-8)", ferrolock.ErrInvalidConfig, connectWith(url, &ferrolock.ClientOptions{Prefix: "\xc3"})},
		{"Connect(WatchdogTTL 3ms)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{WatchdogTTL: 3 * time.Millisecond})},
		{"Connect(ReplicaAcksTimeout 5s)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{ReplicaAcks: 1, ReplicaAcksTimeout: 5 * time.Second})},
		// Every negative duration is a mistake, not "the default" (which 0 asks for): each one is
		// checked by the binding, as time.Duration is signed and the C fields are not.
		{"Connect(WatchdogTTL negative)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{WatchdogTTL: -time.Second})},
		{"Connect(ReplicaAcksTimeout negative)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{ReplicaAcks: 1, ReplicaAcksTimeout: -time.Millisecond})},
		{"ConnectRedlock(RedlockNodeTimeout negative)", ferrolock.ErrInvalidDuration, func(t *testing.T) error {
			return only(ferrolock.ConnectRedlock(ctx, []string{url}, &ferrolock.ClientOptions{RedlockNodeTimeout: -time.Millisecond}))
		}},
		{"ConnectRedlock(RedlockQuorum negative)", ferrolock.ErrInvalidConfig, func(t *testing.T) error {
			return only(ferrolock.ConnectRedlock(ctx, []string{url}, &ferrolock.ClientOptions{RedlockQuorum: -1}))
		}},
		{"Connect(DriftMin negative)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{DriftMin: -time.Millisecond})},
		{"Connect(FenceRetention negative)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{FenceRetention: -time.Hour})},
		{"Connect(SubscriptionLinger negative)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{SubscriptionLinger: -time.Second})},
		{"Connect(RedlockRetryJitter negative)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{RedlockRetryJitter: -time.Millisecond})},
		{"Connect(RedlockMaxInflight negative)", ferrolock.ErrInvalidConfig, connectWith(url, &ferrolock.ClientOptions{RedlockMaxInflight: -1})},
		// Values the core refuses, passed through the C options.
		{"Connect(DriftFactor NaN)", ferrolock.ErrInvalidConfig, connectWith(url, &ferrolock.ClientOptions{DriftFactor: math.NaN()})},
		{"Connect(DriftFactor 0.5)", ferrolock.ErrInvalidConfig, connectWith(url, &ferrolock.ClientOptions{DriftFactor: 0.5})},
		{"Connect(DriftMin 61s)", ferrolock.ErrInvalidConfig, connectWith(url, &ferrolock.ClientOptions{DriftMin: 61 * time.Second})},
		{"Connect(FenceRetention 400 days)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{FenceRetention: 400 * 24 * time.Hour})},
		{"Connect(SubscriptionLinger 400 days)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{SubscriptionLinger: 400 * 24 * time.Hour})},
		{"Connect(RedlockRetryJitter 61s)", ferrolock.ErrInvalidDuration, connectWith(url, &ferrolock.ClientOptions{RedlockRetryJitter: 61 * time.Second})},
		{"Connect(cancelled context)", ferrolock.ErrCancelled, func(t *testing.T) error {
			err := only(ferrolock.Connect(cancelled, url, nil))
			if !errors.Is(err, context.Canceled) {
				return fmt.Errorf("not context.Canceled: %v", err)
			}
			return err
		}},
		// Key sizes: empty, cap + 1, 1 MiB (refused before any I/O; allowed once the cap is raised).
		{`Lock("")`, ferrolock.ErrInvalidName, lockWith("", nil)},
		{"Lock(cap + 1 bytes)", ferrolock.ErrInvalidName, lockWith("seventeen-bytes!!", nil)},
		{"Lock(1 MiB, default cap)", ferrolock.ErrInvalidName, func(t *testing.T) error { return only(dflt.Lock(bigName, nil)) }},
		{"Lock(binary name at the cap) allowed", 0, func(t *testing.T) error {
			l := newLock(t, c, "b\x00{}\r\n \xff\x00xyz\x00\x00\a\b", lease(5*time.Second))
			release(t, acquire(t, l, time.Second))
			return nil
		}},
		{"Lock(1 MiB, cap 2 MiB) allowed", 0, func(t *testing.T) error {
			roomy := connect(t, url, &ferrolock.ClientOptions{MaxNameLen: 2 << 20})
			release(t, acquire(t, newLock(t, roomy, bigName, lease(5*time.Second)), time.Second))
			return nil
		}},
		// TTL 0, negative, tiny, huge, ms->ns overflow; renew modes.
		{"Lock(TTL 0: the watchdog lease) allowed", 0, func(t *testing.T) error {
			l, err := c.Lock("n", &ferrolock.LockOptions{})
			if err == nil {
				l.Close()
			}
			return err
		}},
		{"Lock(TTL 0, RenewNever: a fixed watchdog-TTL lease) allowed", 0, func(t *testing.T) error {
			l, err := c.Lock("n", &ferrolock.LockOptions{Renew: ferrolock.RenewNever})
			if err == nil {
				l.Close()
			}
			return err
		}},
		{"Lock(TTL -1s)", ferrolock.ErrInvalidDuration, lockWith("n", &ferrolock.LockOptions{TTL: -time.Second})},
		{"Lock(TTL 1ms: no validity after drift)", ferrolock.ErrInvalidDuration, lockWith("n", lease(time.Millisecond))},
		{"Lock(TTL 400 days)", ferrolock.ErrInvalidDuration, lockWith("n", lease(400*24*time.Hour))},
		{"Lock(TTL MaxInt64)", ferrolock.ErrInvalidDuration, lockWith("n", &ferrolock.LockOptions{TTL: math.MaxInt64, Renew: ferrolock.RenewAlways})},
		{"Lock(Renew 9)", ferrolock.ErrInvalidArgument, lockWith("n", &ferrolock.LockOptions{Renew: 9})},
		{"Extend(live hold, 0)", ferrolock.ErrInvalidDuration, func(t *testing.T) error { return held.Extend(ctx, 0) }},
		{"Extend(live hold, -1s)", ferrolock.ErrInvalidDuration, func(t *testing.T) error { return held.Extend(ctx, -time.Second) }},
		{"Extend(live hold, MaxInt64)", ferrolock.ErrInvalidDuration, func(t *testing.T) error { return held.Extend(ctx, math.MaxInt64) }},
		{"Ensure(live hold, -1h)", ferrolock.ErrInvalidDuration, func(t *testing.T) error { return held.Ensure(-time.Hour) }},
		{"Acquire(expired deadline)", ferrolock.ErrAcquireTimeout, func(t *testing.T) error {
			err := only(rival.Acquire(expired))
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("not context.DeadlineExceeded: %v", err)
			}
			return err
		}},
		{"Acquire(cancelled context)", ferrolock.ErrCancelled, func(t *testing.T) error { return only(rival.Acquire(cancelled)) }},
		{"Acquire(context cancelled with a cause)", ferrolock.ErrCancelled, func(t *testing.T) error {
			shutdown := errors.New("shutting down")
			cctx, cancel := context.WithCancelCause(context.Background())
			cancel(shutdown)
			err := only(rival.Acquire(cctx))
			if !errors.Is(err, context.Canceled) || !errors.Is(err, shutdown) {
				return fmt.Errorf("not both context.Canceled and the cause: %v", err)
			}
			return err
		}},
		{"Acquire(deadline with a cause)", ferrolock.ErrAcquireTimeout, func(t *testing.T) error {
			late := errors.New("too late")
			dctx, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), late)
			defer cancel()
			err := only(rival.Acquire(dctx))
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, late) {
				return fmt.Errorf("not both context.DeadlineExceeded and the cause: %v", err)
			}
			return err
		}},
		// Use after close.
		{"Lock(closed client)", ferrolock.ErrClosed, func(t *testing.T) error { return only(closedClient.Lock("n", nil)) }},
		{"ForceUnlock(closed client)", ferrolock.ErrClosed, func(t *testing.T) error { _, err := closedClient.ForceUnlock(ctx, "matrix"); return err }},
		{"Acquire(closed lock)", ferrolock.ErrClosed, func(t *testing.T) error { return only(closedLock.Acquire(ctx)) }},
		{"TryAcquire(closed lock)", ferrolock.ErrClosed, func(t *testing.T) error { return only(closedLock.TryAcquire(ctx)) }},
		{"Release(closed held)", ferrolock.ErrClosed, func(t *testing.T) error { return closedHeld.Release(ctx) }},
		{"Extend(closed held)", ferrolock.ErrClosed, func(t *testing.T) error { return closedHeld.Extend(ctx, time.Second) }},
		{"Count(closed held)", ferrolock.ErrClosed, func(t *testing.T) error { _, err := closedHeld.Count(); return err }},
		{"Ensure(closed held)", ferrolock.ErrClosed, func(t *testing.T) error { return closedHeld.Ensure(0) }},
		{"State/Remaining(closed held): released, 0", 0, func(t *testing.T) error {
			if s, r := closedHeld.State(), closedHeld.Remaining(); s != ferrolock.StateReleased || r != 0 {
				return fmt.Errorf("closed held reports %v, %v left", s, r)
			}
			return nil
		}},
		// Nil handles (`c, err := Connect(…); defer c.Close()` with err set) and a zero Held:
		// closed, never a panic.
		{"Close(nil client, lock and held; zero held)", 0, func(t *testing.T) error {
			return errors.Join((*ferrolock.Client)(nil).Close(), (*ferrolock.Lock)(nil).Close(),
				(*ferrolock.Held)(nil).Close(), (&ferrolock.Held{}).Close())
		}},
		{"Lock(nil client)", ferrolock.ErrClosed, func(t *testing.T) error { return only((*ferrolock.Client)(nil).Lock("n", nil)) }},
		{"ForceUnlock(nil client)", ferrolock.ErrClosed, func(t *testing.T) error { _, err := (*ferrolock.Client)(nil).ForceUnlock(ctx, "matrix"); return err }},
		{"Acquire(nil lock)", ferrolock.ErrClosed, func(t *testing.T) error { return only((*ferrolock.Lock)(nil).Acquire(ctx)) }},
		{"TryAcquire(nil lock)", ferrolock.ErrClosed, func(t *testing.T) error { return only((*ferrolock.Lock)(nil).TryAcquire(ctx)) }},
		{"Release(nil held)", ferrolock.ErrClosed, func(t *testing.T) error { return (*ferrolock.Held)(nil).Release(ctx) }},
		{"Extend(zero held)", ferrolock.ErrClosed, func(t *testing.T) error { return (&ferrolock.Held{}).Extend(ctx, time.Second) }},
		{"Ensure(nil held)", ferrolock.ErrClosed, func(t *testing.T) error { return (*ferrolock.Held)(nil).Ensure(0) }},
		{"nil handles' getters: false, \"\", released, 0, never lost, done context", 0, func(t *testing.T) error {
			var h, z, l = (*ferrolock.Held)(nil), &ferrolock.Held{}, (*ferrolock.Lock)(nil)
			if (*ferrolock.Client)(nil).IsRedlock() || l.Name() != "" || h.Fence() != 0 || h.Lost() != nil || z.Lost() != nil {
				return errors.New("a nil handle's getter reports something")
			}
			for _, x := range []*ferrolock.Held{h, z} {
				if n, err := x.Count(); n != 0 || !errors.Is(err, ferrolock.ErrClosed) || x.State() != ferrolock.StateReleased ||
					x.Remaining() != 0 || x.Context().Err() == nil {
					return fmt.Errorf("%#v: count %d (%v), %v, %v left, context %v", x, n, err, x.State(), x.Remaining(), x.Context().Err())
				}
			}
			return nil
		}},
		// A context deadline beyond the longest wait the library takes (one year) is no error:
		// the wait is unbounded and ends with the context.
		{"Acquire(deadline in two years), free lock: granted", 0, func(t *testing.T) error {
			far, cancel := context.WithDeadline(ctx, time.Now().Add(2*365*24*time.Hour))
			defer cancel()
			l := newLock(t, c, "matrix-far", lease(5*time.Second))
			h, err := l.Acquire(far)
			if err != nil {
				return err
			}
			return h.Release(ctx)
		}},
		{"Acquire(deadline in two years, then cancelled), held lock", ferrolock.ErrCancelled, func(t *testing.T) error {
			far, cancel := context.WithDeadline(ctx, time.Now().Add(2*365*24*time.Hour))
			time.AfterFunc(50*time.Millisecond, cancel)
			return only(rival.Acquire(far))
		}},
		// Double release: "not held", never deletes another's (or a newer) hold.
		{"Release(released, the same Lock holds again)", ferrolock.ErrNotHeld, func(t *testing.T) error { return releasedMine.Release(ctx) }},
		{"Release(released, another Lock holds)", ferrolock.ErrNotHeld, func(t *testing.T) error { return releasedRival.Release(ctx) }},
		{"Extend(released)", ferrolock.ErrNotHeld, func(t *testing.T) error { return releasedMine.Extend(ctx, time.Second) }},
		{"Ensure(released)", ferrolock.ErrNotHeld, func(t *testing.T) error { return releasedMine.Ensure(0) }},
		// Release from another goroutine.
		{"Release(released) on another goroutine", ferrolock.ErrNotHeld, func(t *testing.T) error {
			ch := make(chan error)
			go func() { ch <- releasedRival.Release(ctx) }()
			return <-ch
		}},
		{"Release(live hold) on another goroutine allowed", 0, func(t *testing.T) error {
			l := newLock(t, c, "matrix-goroutine", lease(5*time.Second))
			h := acquire(t, l, time.Second)
			ch := make(chan error)
			go func() { ch <- h.Release(ctx) }()
			if err := <-ch; err != nil {
				return err
			}
			if h.State() != ferrolock.StateReleased || !isFree(t, l) {
				return errors.New("released on another goroutine but still held")
			}
			return nil
		}},
		{"Release(live hold) on two goroutines at once: one wins", ferrolock.ErrNotHeld, func(t *testing.T) error {
			l := newLock(t, c, "matrix-race", lease(5*time.Second))
			h := acquire(t, l, time.Second)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = h.Release(ctx) }()
			}
			wg.Wait()
			if (errs[0] == nil) == (errs[1] == nil) || !isFree(t, l) {
				return fmt.Errorf("want exactly one release to succeed: %v, %v", errs[0], errs[1])
			}
			return errors.Join(errs...)
		}},
		// Reentrancy overflow: depth 3 with MaxReentrancy 2, the depth stays 2.
		{"Acquire(depth 3, MaxReentrancy 2)", ferrolock.ErrReentrancyLimit, func(t *testing.T) error {
			second := acquire(t, mine, time.Second)
			defer release(t, second)
			err := only(mine.Acquire(ctx))
			if n, _ := held.Count(); n != 2 {
				return fmt.Errorf("depth %d after a refused re-entry, want 2 (%v)", n, err)
			}
			return err
		}},
		// An outcome that must leave nothing behind: replica acknowledgement against a server
		// without replicas undoes the grant.
		{"TryAcquire(ReplicaAcks 1, no replica)", ferrolock.ErrNotReplicated, func(t *testing.T) error {
			acked := connect(t, url, &ferrolock.ClientOptions{ReplicaAcks: 1, ReplicaAcksTimeout: 20 * time.Millisecond})
			err := only(newLock(t, acked, "matrix-acks", nil).TryAcquire(ctx))
			if !isFree(t, newLock(t, dflt, "matrix-acks", nil)) {
				return fmt.Errorf("a refused grant left a hold (%v)", err)
			}
			return err
		}},
	}

	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			err := callNoPanic(t, r.call)
			switch {
			case r.want == 0 && err != nil:
				t.Errorf("got %v, want no error", err)
			case r.want != 0 && (!errors.Is(err, r.want) || ferrolock.Code(err) != r.want):
				t.Errorf("got %v (code %v), want %v", err, ferrolock.Code(err), r.want)
			case r.want != 0:
				// Every message starts "CODE: ", the C library's and the context errors' alike.
				var e *ferrolock.Error
				if !errors.As(err, &e) || !strings.HasPrefix(e.Message, r.want.String()+":") {
					t.Errorf("message %q does not start with %s", err, r.want)
				}
			}
			// Nothing lost: the live hold is untouched.
			n, cerr := held.Count()
			if held.State() != ferrolock.StateHeld || held.Fence() != fence || n != 1 || cerr != nil ||
				held.Remaining() < time.Second || held.Ensure(0) != nil {
				t.Fatalf("the live hold changed: state %v, fence %d (want %d), depth %d (%v), %v left",
					held.State(), held.Fence(), fence, n, cerr, held.Remaining())
			}
			if isFree(t, rival) {
				t.Fatal("another Lock could take the live hold's lock")
			}
		})
	}
	release(t, held)
	if !isFree(t, rival) {
		t.Fatal("the lock is not free after the matrix")
	}
}
