package ferrolock

/*
#include "ferrolock.h"
*/
import "C"

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
)

// RenewMode says whether the watchdog keeps a lease alive.
type RenewMode uint32

const (
	// RenewDefault renews exactly when no TTL is given.
	RenewDefault RenewMode = C.FERROLOCK_RENEW_DEFAULT
	// RenewAlways keeps the lease alive (every TTL/3) until release.
	RenewAlways RenewMode = C.FERROLOCK_RENEW_ALWAYS
	// RenewNever makes a fixed lease: the hold expires TTL (0: the client's WatchdogTTL) after
	// each acquire or extend.
	RenewNever RenewMode = C.FERROLOCK_RENEW_NEVER
)

// LockOptions configures Client.Lock. The zero value (or nil) is a watchdog-renewed lease of the
// client's WatchdogTTL.
type LockOptions struct {
	TTL   time.Duration // lease length; 0: the client's WatchdogTTL
	Renew RenewMode
	// Fair: waiters queue on the server and each release hands the lock to the oldest one
	// (first come, first served). Not on a Redlock client or with ReplicaAcks (ErrInvalidConfig).
	Fair bool
}

// Lock is one named lock with its own owner token. Safe for concurrent use; acquiring through the
// same Lock re-enters (same fence, count+1), from any goroutine: goroutines sharing one Lock
// share its hold, unlike sync.Mutex. For mutual exclusion between goroutines, give each its own
// Lock (Client.Lock does no I/O). Close it when done.
type Lock struct {
	mu   sync.Mutex
	ptr  *C.ferrolock_lock // nil once closed
	name string
}

// Name returns the lock's name.
func (l *Lock) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Close frees the handle. Idempotent. Held locks acquired through it stay usable, and so does an
// Acquire or TryAcquire already under way on it (Close does not interrupt it: cancel its ctx, or
// Close the Client, which ends every waiting Acquire of its locks).
func (l *Lock) Close() error {
	if p := l.take(); p != nil {
		C.ferrolock_lock_free(p)
		runtime.SetFinalizer(l, nil)
	}
	return nil
}

// Acquire takes the lock, waiting until ctx ends (without a deadline or cancellation: without
// bound). Waiting is driven by release notifications in the core, not polling. When ctx ends
// first the error matches ErrAcquireTimeout (deadline) or ErrCancelled, and also the context's
// own error; its message quotes the last attempt's failure when the attempts failed (a server
// that did not answer), as in the other languages. At ctx's deadline the core's own end of the
// same wait reports first (within deadlineGrace): on a Redlock client whose last round did not
// reach a quorum the error is ErrQuorumNotReached (wrapping the context's error), as in the other
// languages. An attempt interrupted in flight is undone
// in Redis, and a grant that races with the end of ctx is released, so a failed Acquire never
// leaves a hold behind.
func (l *Lock) Acquire(ctx context.Context) (*Held, error) {
	p := l.load()
	if p == nil {
		return nil, closedError("lock")
	}
	if ctx.Err() != nil {
		return nil, contextError(ctx, ErrAcquireTimeout)
	}
	wait := C.int64_t(-1)
	dl, bounded := ctx.Deadline()
	if bounded && time.Until(dl) <= maxWait {
		wait = C.int64_t(millis(time.Until(dl)))
	}
	// A deadline further away than the library accepts as a wait: wait without bound, and let
	// ctx's cancellation (below: a context with a deadline can always be cancelled) end it.
	var cerr *C.ferrolock_error
	if ctx.Done() == nil { // never cancelled: no token needed
		var g *C.ferrolock_guard
		rc := C.ferrolock_lock_acquire(p, wait, &g, &cerr)
		runtime.KeepAlive(l)
		if err := check(rc, cerr); err != nil {
			return nil, err
		}
		return newHeld(ctx, g), nil
	}
	var cancel *C.ferrolock_cancel
	rc := C.ferrolock_cancel_new(&cancel, &cerr) // the call before cerr is read (see Held.watchLoss)
	if err := check(rc, cerr); err != nil {
		return nil, err
	}
	defer C.ferrolock_cancel_free(cancel)
	var late *time.Timer // guarded by lateMu: the deadline's deferred cancel
	var lateMu sync.Mutex
	stop := context.AfterFunc(ctx, func() {
		// Triggering a token already freed is answered with CLOSED: harmless.
		trigger := func() { C.ferrolock_cancel_trigger(cancel, nil) }
		if wait >= 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The core's own wait ends at this deadline too (rounded up to the millisecond)
			// and says why, as in the other languages: ACQUIRE_TIMEOUT quoting a failed last
			// attempt, QUORUM_NOT_REACHED for a Redlock quorum that did not answer. Let it,
			// and cancel only if it has not returned shortly after (a try in flight).
			lateMu.Lock()
			late = time.AfterFunc(deadlineGrace, trigger)
			lateMu.Unlock()
			return
		}
		trigger()
	})
	var g *C.ferrolock_guard
	cerr = nil
	rc = C.ferrolock_lock_acquire_cancellable(p, wait, cancel, &g, &cerr)
	stop()
	lateMu.Lock()
	if late != nil {
		late.Stop()
	}
	lateMu.Unlock()
	runtime.KeepAlive(l)
	if err := check(rc, cerr); err != nil {
		if bounded && (errors.Is(err, ErrAcquireTimeout) ||
			errors.Is(err, ErrQuorumNotReached) && !time.Now().Before(dl)) {
			// The core's wait was the time left to ctx's deadline, rounded up to the
			// millisecond, and the core times out only once its monotonic clock has passed
			// it: the deadline is behind us even when Go's timer has not yet marked ctx done
			// (a loaded machine delays it). Wait for that mark, so the error always wraps
			// context.DeadlineExceeded, as one from ctx itself would.
			<-ctx.Done()
		}
		var fe *Error
		if ctx.Err() != nil && errors.Is(err, ErrQuorumNotReached) && errors.As(err, &fe) {
			fe.wrapped = ctxCause(ctx) // the wait ended without a quorum: say so, and wrap ctx's error
			return nil, fe
		}
		if ctx.Err() != nil && (errors.Is(err, ErrAcquireTimeout) || errors.Is(err, ErrCancelled)) {
			ce := contextError(ctx, ErrAcquireTimeout)
			// Keep the core's account of failed attempts (a server that did not answer), which
			// the other languages' bounded waits report: without it this error reads the same
			// as for a lock that was only held by another owner.
			var fe, out *Error
			if errors.As(err, &fe) && errors.As(ce, &out) {
				if fe.Cause != nil {
					out.Message += "; the last attempt failed: " + fe.Cause.Message
					out.Cause = fe.Cause
				}
			}
			return nil, ce
		}
		return nil, err
	}
	return deliver(ctx, g)
}

// deliver makes the Held of a grant, unless ctx ended meanwhile: the caller will not use a grant
// that raced with the end of ctx, so it is given back at once.
func deliver(ctx context.Context, g *C.ferrolock_guard) (*Held, error) {
	h := newHeld(ctx, g)
	if ctx.Err() != nil {
		_ = h.Release(context.Background())
		h.Close()
		return nil, contextError(ctx, ErrAcquireTimeout)
	}
	return h, nil
}

// deadlineGrace is how long after ctx's deadline Acquire lets the core end the same wait on its
// own (and report why) before it cancels it.
const deadlineGrace = 200 * time.Millisecond

// maxWait is the longest wait the library accepts (one year, core's MAX_DURATION).
const maxWait = 365 * 24 * time.Hour

// TryAcquire makes one attempt without waiting: (nil, nil) when another owner holds the lock.
// The attempt is one request, but a server that stops answering holds it for the client's
// response timeouts (up to about four: the hot-path connect, the attempt, its undo and the
// undo's retry, docs/CONNECTIONS.md; Redlock: RedlockNodeTimeout per master); ctx ends it
// sooner, with an error matching ErrAcquireTimeout (deadline) or ErrCancelled and the context's
// own error. An
// attempt cut short is undone in Redis, and a grant that races with the end of ctx is released.
// The returned Held carries ctx's values, not its cancellation.
func (l *Lock) TryAcquire(ctx context.Context) (*Held, error) {
	p := l.load()
	if p == nil {
		return nil, closedError("lock")
	}
	if ctx.Err() != nil {
		return nil, contextError(ctx, ErrAcquireTimeout)
	}
	var g *C.ferrolock_guard
	var cerr *C.ferrolock_error
	var rc C.ferrolock_result
	if ctx.Done() == nil { // never cancelled: no token needed
		rc = C.ferrolock_lock_try_acquire(p, &g, &cerr)
	} else {
		var cancel *C.ferrolock_cancel
		rc = C.ferrolock_cancel_new(&cancel, &cerr) // the call before cerr is read (see Held.watchLoss)
		if err := check(rc, cerr); err != nil {
			return nil, err
		}
		defer C.ferrolock_cancel_free(cancel)
		// Triggering a token already freed is answered with CLOSED: harmless.
		stop := context.AfterFunc(ctx, func() { C.ferrolock_cancel_trigger(cancel, nil) })
		cerr = nil
		rc = C.ferrolock_lock_try_acquire_cancellable(p, cancel, &g, &cerr)
		stop()
	}
	runtime.KeepAlive(l)
	if err := check(rc, cerr); err != nil {
		if ctx.Err() != nil && errors.Is(err, ErrCancelled) {
			return nil, contextError(ctx, ErrAcquireTimeout)
		}
		return nil, err
	}
	if g == nil {
		return nil, nil
	}
	return deliver(ctx, g)
}

// load and take treat a nil *Lock as closed (ErrClosed, never a panic).
func (l *Lock) load() *C.ferrolock_lock {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ptr
}

func (l *Lock) take() *C.ferrolock_lock {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.ptr
	l.ptr = nil
	return p
}
