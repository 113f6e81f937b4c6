package ferrolock

/*
#include "ferrolock.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"unsafe"
)

// ErrorCode is one of the core's stable numeric error codes (ferrolock::ErrorKind), the same in
// every language. The Err* constants (codes_gen.go, generated from the core) are ErrorCodes and
// serve as errors.Is sentinels:
//
//	if errors.Is(err, ferrolock.ErrNotHeld) { … }
type ErrorCode uint32

// String returns the stable string code, e.g. "NOT_HELD".
func (c ErrorCode) String() string {
	if n := c.name(); n != "" {
		return n
	}
	return fmt.Sprintf("ErrorCode(%d)", uint32(c))
}

// Error makes an ErrorCode usable as a sentinel error.
func (c ErrorCode) Error() string { return "ferrolock: " + c.String() }

// Format prints the stable string code for %v and %s ("NOT_HELD", as String does: fmt would
// otherwise prefer Error, "ferrolock: NOT_HELD"), the number for %d, and %q quoted.
func (c ErrorCode) Format(f fmt.State, verb rune) {
	switch verb {
	case 'd':
		fmt.Fprintf(f, "%d", uint32(c))
	case 'q':
		fmt.Fprintf(f, "%q", c.String())
	default:
		fmt.Fprint(f, c.String())
	}
}

// Error is a failed call: the stable code and a message (which never contains a password).
type Error struct {
	Code    ErrorCode
	Message string
	// Cause is the failure behind an ErrAcquireTimeout or ErrCancelled wait whose attempts
	// failed (a server that did not answer: ErrTimeout, ErrConnection; a grant not replicated),
	// which the message quotes too; nil when the wait ended because another owner held the
	// lock. It is not in the Unwrap chain: errors.Is(err, ErrTimeout) keeps meaning that the
	// call itself timed out, not a wait that ended after failed attempts.
	Cause   *Error
	wrapped error // the context error of a call its context ended (Unwrap)
}

func (e *Error) Error() string { return "ferrolock: " + e.Message }

// Is reports whether target is this error's ErrorCode, so errors.Is(err, ErrLost) works.
func (e *Error) Is(target error) bool {
	c, ok := target.(ErrorCode)
	return ok && c == e.Code
}

// As sets an *ErrorCode target to this error's code, so errors.As(err, &code) works like Code.
func (e *Error) As(target any) bool {
	c, ok := target.(*ErrorCode)
	if ok {
		*c = e.Code
	}
	return ok
}

// Unwrap returns the context error behind ErrAcquireTimeout / ErrCancelled when the call ended
// because its context did (errors.Is(err, context.DeadlineExceeded) then holds too, and so does
// errors.Is(err, cause) for a context cancelled with a cause).
func (e *Error) Unwrap() error { return e.wrapped }

// Code returns the ErrorCode of err, or 0 if err is not a ferrolock error.
func Code(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var c ErrorCode
	if errors.As(err, &c) {
		return c
	}
	return 0
}

// contextError reports a call ended by its context: onDeadline for an expired deadline,
// ErrCancelled otherwise, wrapping the context's cause.
func contextError(ctx context.Context, onDeadline ErrorCode) error {
	code := ErrCancelled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = onDeadline
	}
	return &Error{Code: code, Message: code.String() + ": " + fmt.Sprint(context.Cause(ctx)), wrapped: ctxCause(ctx)}
}

// ctxCause is what an error of a call its context ended wraps: ctx.Err(), so that
// errors.Is(err, context.Canceled / DeadlineExceeded) holds, and the context's own cause when it
// was given one (context.WithCancelCause, WithTimeoutCause), so that errors.Is finds that too.
func ctxCause(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return errors.Join(err, cause)
}

func closedError(what string) error {
	return &Error{Code: ErrClosed, Message: "CLOSED: the " + what + " was closed"}
}

// libraryErrorCodes is the C library's own list of codes (for the test that proves the
// generated Go codes match the library).
func libraryErrorCodes() []ErrorCode {
	var p *C.uint32_t
	var n C.size_t
	C.ferrolock_result_list(&p, &n, nil)
	out := make([]ErrorCode, 0, int(n))
	for _, v := range unsafe.Slice(p, int(n)) {
		out = append(out, ErrorCode(v))
	}
	return out
}

// libraryCodeName is the C library's name for a code ("UNKNOWN" if it has none).
func libraryCodeName(c ErrorCode) string {
	return C.GoString(C.ferrolock_result_name(C.uint32_t(c)))
}
