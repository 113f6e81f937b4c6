package ferrolock

/*
#include "ferrolock.h"
ferrolock_result ferrolock_go_on_lost(const ferrolock_guard *guard, uintptr_t handle, ferrolock_error **out_error);
*/
import "C"

import (
	"context"
	"runtime"
	"runtime/cgo"
	"sync"
	"time"
)

// State is where a hold stands.
type State int

const (
	StateHeld     State = C.FERROLOCK_LOCK_STATE_HELD     // held, lease confirmed
	StateInDoubt  State = C.FERROLOCK_LOCK_STATE_IN_DOUBT // a renewal failed; still within the deadline
	StateLost     State = C.FERROLOCK_LOCK_STATE_LOST     // lease ran out or another owner took it (final)
	StateReleased State = C.FERROLOCK_LOCK_STATE_RELEASED // released by its owner (final)
)

func (s State) String() string {
	switch s {
	case StateHeld:
		return "held"
	case StateInDoubt:
		return "in_doubt"
	case StateLost:
		return "lost"
	case StateReleased:
		return "released"
	}
	return "unknown"
}

// lostState is what the library's loss callback reaches (through a cgo.Handle): it is separate
// from Held so that a Held nobody references can still be finalized.
type lostState struct {
	ch     chan struct{}
	cancel context.CancelCauseFunc
	once   sync.Once
}

func (s *lostState) end(lost error) {
	s.once.Do(func() {
		if lost != nil {
			// Context first: whoever wakes on Lost() must already see Context() done.
			s.cancel(lost)
			close(s.ch)
		} else {
			s.cancel(context.Canceled)
		}
	})
}

// Held is one level of a held lock. Release it with Release; Close (or the finalizer) only frees
// the handle: it never releases the lock in Redis, it stops renewal and lets the lease run out.
type Held struct {
	mu  sync.Mutex
	ptr *C.ferrolock_guard // nil once closed
	// Release calls that may still be using ptr after returning (ctx ended first), and whether
	// Close was called meanwhile: the last of them frees ptr instead, so its release is sent.
	releasing int
	closing   bool
	fence     uint64
	lost      *lostState
	ctx       context.Context
	watch     sync.Once // the loss callback, registered on first use of Lost or Context
	// unseen is a Release whose ctx ended before it did: it goes on in the background, and the
	// next Release reports its outcome rather than being told the level was already released.
	unseen *releaseRun
}

// releaseRun is one Release's call into the library.
type releaseRun struct {
	done chan struct{}
	err  error // set before done is closed
}

func newHeld(parent context.Context, g *C.ferrolock_guard) *Held {
	var fence C.uint64_t
	C.ferrolock_guard_fence(g, &fence, nil)
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	st := &lostState{ch: make(chan struct{}), cancel: cancel}
	h := &Held{fence: uint64(fence), lost: st, ctx: ctx}
	h.ptr = g
	runtime.SetFinalizer(h, (*Held).finalize)
	return h
}

// finalize is Close for a Held the garbage collector found unreferenced while still holding:
// renewal stops and the lease runs out, so whoever kept only Lost() (a "leader
// until lost" loop) learns it now, as a loss; nothing would tell them later.
func (h *Held) finalize() {
	if h.load() != nil && h.lost != nil {
		h.lost.end(&Error{Code: ErrLost, Message: "LOST: the Held was garbage-collected without Release: " +
			"its renewal stopped and its lease runs out"})
	}
	h.Close()
}

// watchLoss registers the library's loss callback the first time Lost or Context is used (if
// the hold is lost or released by then, the library calls it at once). A hold nobody watches
// costs no callback: the library makes it on one of its own threads, and a call into Go from a
// thread Go did not start is expensive (about 20 µs and three context switches per release in
// bench W1).
func (h *Held) watchLoss() {
	h.watch.Do(func() {
		p := h.load()
		if p == nil {
			return // closed: Close ended the state already
		}
		handle := cgo.NewHandle(h.lost)
		var cerr *C.ferrolock_error
		// The call first, then cerr: Go does not order a call against a plain operand of the
		// same expression.
		rc := C.ferrolock_go_on_lost(p, C.uintptr_t(handle), &cerr)
		if err := check(rc, cerr); err != nil {
			handle.Delete() // not registered: never called
		}
		runtime.KeepAlive(h)
	})
}

//export ferrolockGoLost
func ferrolockGoLost(handle C.uintptr_t, code C.uint32_t, message *C.char) {
	h := cgo.Handle(handle)
	st, _ := h.Value().(*lostState)
	h.Delete() // the library calls exactly once per registration
	if st == nil {
		return
	}
	if code != 0 {
		st.end(&Error{Code: ErrorCode(code), Message: C.GoString(message)})
	} else {
		st.end(nil)
	}
}

// Fence returns the fencing token: strictly increasing across grants of the lock name, the same
// for re-entry and renewal. Pass it to the resource, which must reject lower tokens.
func (h *Held) Fence() uint64 {
	if h == nil {
		return 0
	}
	return h.fence
}

// Lost returns a channel closed when the hold is lost (never closed if it is released first).
func (h *Held) Lost() <-chan struct{} {
	if h == nil || h.lost == nil {
		return nil // not a hold (nil or zero Held): never lost
	}
	h.watchLoss()
	return h.lost.ch
}

// Context returns a context (carrying the values of Acquire's context) that is cancelled when the
// hold is lost (context.Cause is then an *Error matching ErrLost), or with context.Canceled when
// this Held is released or closed. Run the work that needs the lock under it: the context, and
// every context derived from it, keeps this Held from being collected, so the hold stays renewed
// while they are in use even if nothing else refers to the Held.
func (h *Held) Context() context.Context {
	if h == nil || h.ctx == nil {
		return closedContext // not a hold (nil or zero Held): as after Close
	}
	h.watchLoss()
	return heldContext{h.ctx, h}
}

// heldContext keeps its Held reachable: a leader that kept only Held.Context() had its Held
// collected, so its renewal stopped and the lease ran out under work still running. A new value
// per call, never stored in the Held: a cycle through an object with a finalizer is never
// collected.
type heldContext struct {
	context.Context
	h *Held
}

var closedContext = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Release releases this level of the hold (at depth 0 the lock is deleted and waiters wake).
// The release is always sent. If ctx is already done, Release waits for it all the same (a
// round trip; at most the client's response timeouts with a stalled server), so that a Close
// of the Held or the Client right after it cannot stop it; if ctx ends during the call, Release
// returns early while the release completes in the background (a Close of the Held meanwhile
// waits for it), and the next Release waits for that one and returns nil once it succeeded (or
// sends the release again if it failed). Errors: ErrNotHeld after a previous release, ErrLost if
// the hold was lost meanwhile (nothing of another owner is deleted).
func (h *Held) Release(ctx context.Context) error {
	if h != nil {
		h.mu.Lock()
		run := h.unseen
		h.mu.Unlock()
		if run != nil {
			if ctx.Err() != nil {
				// A context already done waits all the same (see below), so that a Close right
				// after this Release cannot stop the release, and a failed one is sent again.
				<-run.done
			} else {
				select {
				case <-run.done:
				case <-ctx.Done():
					select {
					case <-run.done: // both ready: the outcome, not the context, as above
					default:
						return contextError(ctx, ErrTimeout)
					}
				}
			}
			h.mu.Lock()
			if h.unseen == run {
				h.unseen = nil
			}
			h.mu.Unlock()
			if run.err == nil {
				return nil // the release this call retries went through
			}
			// It failed (a transient failure leaves the level unreleased): send it again.
		}
	}
	p := h.useForRelease()
	if p == nil {
		return closedError("held lock")
	}
	run := &releaseRun{done: make(chan struct{})}
	release := func() {
		defer close(run.done)
		defer h.releaseDone()
		var cerr *C.ferrolock_error
		rc := C.ferrolock_guard_release(p, &cerr)
		runtime.KeepAlive(h)
		if rc == C.FERROLOCK_RESULT_OK {
			// This level is released (the hold may live on through re-entered levels): its
			// context ends now, and it can no longer be lost.
			h.lost.end(nil)
		}
		run.err = check(rc, cerr)
	}
	if ctx.Err() != nil || ctx.Done() == nil {
		// Started in the background, the release would reach the core only when its goroutine
		// runs: after a Client.Close that the caller makes next (a shutdown with a request's
		// cancelled context), which refuses it, and the lock would stay held for its lease.
		release()
		return run.err
	}
	go release()
	select {
	case <-run.done:
		return run.err
	case <-ctx.Done():
		h.mu.Lock()
		h.unseen = run
		h.mu.Unlock()
		return contextError(ctx, ErrTimeout)
	}
}

// Extend sets the lease to ttl from now (owner-checked in Redis): a ttl shorter than what is
// left shortens it, and on a lock the watchdog renews, ttl becomes the lease of every later
// renewal too. ErrLost if it was lost.
func (h *Held) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx.Err() != nil {
		return contextError(ctx, ErrTimeout)
	}
	if ttl <= 0 {
		return &Error{Code: ErrInvalidDuration, Message: "INVALID_DURATION: ttl must be positive"}
	}
	_, err := withContext(ctx, func() (struct{}, error) {
		p := h.load()
		if p == nil {
			return struct{}{}, closedError("held lock")
		}
		var cerr *C.ferrolock_error
		rc := C.ferrolock_guard_extend(p, millis(ttl), &cerr)
		runtime.KeepAlive(h)
		return struct{}{}, check(rc, cerr)
	}, nil)
	return err
}

// Count returns the reentrancy depth of the hold (0 once released or lost).
func (h *Held) Count() (int, error) {
	p := h.load()
	if p == nil {
		return 0, closedError("held lock")
	}
	var n C.uint32_t
	var cerr *C.ferrolock_error
	rc := C.ferrolock_guard_count(p, &n, &cerr)
	runtime.KeepAlive(h)
	return int(n), check(rc, cerr)
}

// Remaining returns the validity left before the local deadline (0 once lost or released).
func (h *Held) Remaining() time.Duration {
	p := h.load()
	if p == nil {
		return 0
	}
	var ms C.uint64_t
	C.ferrolock_guard_remaining_ms(p, &ms, nil)
	runtime.KeepAlive(h)
	return time.Duration(ms) * time.Millisecond
}

// State returns the hold's state (StateReleased after Close).
func (h *Held) State() State {
	p := h.load()
	if p == nil {
		return StateReleased
	}
	var s C.ferrolock_lock_state = C.FERROLOCK_LOCK_STATE_RELEASED
	C.ferrolock_guard_state(p, &s, nil)
	runtime.KeepAlive(h)
	return State(s)
}

// Ensure returns nil if the hold is still valid for more than margin, else ErrLost (or
// ErrNotHeld after release). Call it before each write that relies on the lock. A negative
// margin is ErrInvalidDuration, as in the other languages.
func (h *Held) Ensure(margin time.Duration) error {
	if margin < 0 {
		return &Error{Code: ErrInvalidDuration, Message: "INVALID_DURATION: margin is negative"}
	}
	p := h.load()
	if p == nil {
		return closedError("held lock")
	}
	var cerr *C.ferrolock_error
	rc := C.ferrolock_guard_ensure(p, millis(margin), &cerr)
	runtime.KeepAlive(h)
	return check(rc, cerr)
}

// Close frees the handle without releasing the lock in Redis (the lease runs out) and cancels
// Context(). Idempotent.
func (h *Held) Close() error {
	if h == nil {
		return nil
	}
	if h.lost != nil {
		h.lost.end(nil)
	}
	if p := h.take(); p != nil {
		C.ferrolock_guard_free(p)
		runtime.SetFinalizer(h, nil)
	}
	return nil
}

// useForRelease is load for a Release that may finish in the background: until releaseDone, a
// Close leaves the handle to it.
func (h *Held) useForRelease() *C.ferrolock_guard {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr == nil || h.closing {
		return nil
	}
	h.releasing++
	return h.ptr
}

// releaseDone ends a useForRelease; the last one after a Close frees the handle.
func (h *Held) releaseDone() {
	h.mu.Lock()
	h.releasing--
	var p *C.ferrolock_guard
	if h.releasing == 0 && h.closing {
		p, h.ptr = h.ptr, nil
	}
	h.mu.Unlock()
	if p != nil {
		C.ferrolock_guard_free(p)
	}
}

// load and take treat a nil *Held as closed (ErrClosed, never a panic).
func (h *Held) load() *C.ferrolock_guard {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return nil
	}
	return h.ptr
}

// take empties the Held for Close; with a Release still using the handle it marks it closing
// instead (the Release frees it when done) and returns nil.
func (h *Held) take() *C.ferrolock_guard {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.releasing > 0 {
		h.closing = true
		return nil
	}
	p := h.ptr
	h.ptr = nil
	return p
}
