// Package ferrolock is the Go binding of ferrolock: Redis distributed locks with fencing tokens,
// reentrancy, watchdog renewal and lost-lock signals, sharing one audited Rust core (through its
// C API, bindings-c/include/ferrolock.h) with the Rust, Python, Node and C bindings. Locks taken
// here contend correctly with locks taken from any of those languages.
//
//	client, err := ferrolock.Connect(ctx, "redis://127.0.0.1:6379", nil)
//	lock, err := client.Lock("orders:42", nil) // watchdog-renewed lease
//	held, err := lock.Acquire(ctx)            // honours ctx's deadline and cancellation
//	defer held.Release(context.Background())
//	write(held.Fence(), held.Context())       // the resource must reject lower fences
//
// Build: the package links the static library target/release/libferrolock_c.a of this
// repository (cargo build --release -p ferrolock-c).
package ferrolock

/*
#cgo CFLAGS: -I${SRCDIR}/../bindings-c/include
#cgo LDFLAGS: ${SRCDIR}/../target/release/libferrolock_c.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
#include <stdlib.h>
#include "ferrolock.h"
*/
import "C"

import (
	"context"
	"time"
	"unsafe"
)

// check converts a C result and its error object (which it frees).
func check(rc C.ferrolock_result, cerr *C.ferrolock_error) error {
	if rc == C.FERROLOCK_RESULT_OK {
		return nil
	}
	e := goError(ErrorCode(rc), cerr)
	C.ferrolock_error_free(cerr)
	return e
}

// goError copies a C error (NULL reads as an empty message) and the failure behind it.
func goError(code ErrorCode, cerr *C.ferrolock_error) *Error {
	e := &Error{Code: code, Message: C.GoString(C.ferrolock_error_message(cerr))}
	if cause := C.ferrolock_error_cause(cerr); cause != nil {
		e.Cause = goError(ErrorCode(C.ferrolock_error_code(cause)), cause)
	}
	return e
}

// bytesArg is a Go string as a C (pointer, length) pair, valid during one cgo call.
func bytesArg(s string) (*C.uint8_t, C.size_t) {
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// millis is d in whole milliseconds, rounded up (a positive d never becomes 0). Rounding divides
// first: adding 999,999 ns before dividing would overflow near the largest Duration.
func millis(d time.Duration) C.uint64_t {
	if d <= 0 {
		return 0
	}
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return C.uint64_t(ms)
}

// withContext runs the blocking f, returning early with ctx's error if ctx ends first; f then
// completes in the background and late (if not nil) disposes of what it produced.
func withContext[T any](ctx context.Context, f func() (T, error), late func(T)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil && late != nil {
				late(r.v)
			}
		}()
		var zero T
		return zero, contextError(ctx, ErrTimeout)
	}
}
