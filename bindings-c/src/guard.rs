//! Guard handles: one level of a held lock, with its fence, state and loss signal.

use std::ffi::c_void;
use std::time::Duration;

use ferrolock::{Error, LockState, blocking};

use crate::boundary::{call, catch, non_null, write};
use crate::error::ferrolock_error;
use crate::handles::Table;
use crate::result::ferrolock_result;

/// One level of a held lock (opaque handle), from ferrolock_lock_acquire() or
/// ferrolock_lock_try_acquire(). Release it with ferrolock_guard_release(), then free it with
/// ferrolock_guard_free(). Freeing an unreleased guard never releases the lock in Redis: it stops
/// renewal (when it was the last guard of its hold) and lets the lease run out. Thread-safe.
#[derive(Debug)]
pub struct ferrolock_guard {
    _opaque: [u8; 0],
}

pub(crate) static GUARDS: Table<ferrolock::Guard> = Table::new("guard");

/// Where a hold stands.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferrolock_lock_state {
    /// Held, with a lease confirmed before the local deadline.
    Held = 1,
    /// A renewal failed or timed out; still within the local deadline.
    InDoubt = 2,
    /// The lease ran out or another owner took the lock. Final.
    Lost = 3,
    /// Released by its owner. Final.
    Released = 4,
}

/// Called once per ferrolock_guard_on_lost() registration, on a library thread (never the
/// thread that registered it):
/// - with `error` (code ::FERROLOCK_RESULT_LOST) when the hold is lost while this guard's level
///   is held;
/// - with `error` NULL when this guard's level ended without loss (released, or its last guard
///   and lock handles were freed), so that `user_data` can be freed. A registration is per guard
///   level: on an inner (re-entered) guard, that level's release ends it, while the hold lives on
///   through the outer levels; register on the outermost guard to hear of the hold's loss.
///
/// `error` is valid only during the call: do not free it. The callback may call ferrolock
/// functions (e.g. free the guard), must not unwind (C++ exceptions, longjmp), and should return
/// promptly.
pub type ferrolock_lost_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, error: *const ferrolock_error)>;

/// The C callback and its data; calls the callback exactly once, with NULL if dropped uncalled.
struct LostNotify {
    cb: unsafe extern "C" fn(*mut c_void, *const ferrolock_error),
    user_data: *mut c_void,
    called: bool,
}

// SAFETY: the caller of ferrolock_guard_on_lost() promises that `user_data` may be used from
// another thread (documented on the function).
unsafe impl Send for LostNotify {}

impl LostNotify {
    fn fire(mut self, error: Option<&Error>) {
        self.called = true;
        self.call(error);
    }

    fn call(&self, error: Option<&Error>) {
        let e = error.map(ferrolock_error::new);
        let p = e.as_ref().map_or(std::ptr::null(), |e| e as *const ferrolock_error);
        // SAFETY: a C function pointer with the documented signature; `p` outlives the call.
        unsafe { (self.cb)(self.user_data, p) };
    }
}

impl Drop for LostNotify {
    fn drop(&mut self) {
        if !self.called {
            // Dropped uncalled (the hold ended without loss). Call from a library thread, never
            // inline: the drop may happen under the core's locks or on a caller's thread. The
            // copy counts as called: were the task dropped unrun, it must not spawn another.
            let rest = LostNotify { cb: self.cb, user_data: self.user_data, called: true };
            self.called = true;
            blocking::runtime().spawn_blocking(move || rest.call(None));
        }
    }
}

/// Release this level of the hold; at depth 0 the lock is deleted in Redis and waiters wake.
/// The guard handle stays valid (state RELEASED) until freed.
///
/// @return ::FERROLOCK_RESULT_OK; ::FERROLOCK_RESULT_NOT_HELD if this guard was already
///         released; ::FERROLOCK_RESULT_LOST if the hold was lost meanwhile (nothing of another
///         owner is deleted); ::FERROLOCK_RESULT_CONNECTION / ::FERROLOCK_RESULT_TIMEOUT leave
///         the guard unreleased, so the call can be retried; ::FERROLOCK_RESULT_CLOSED for a
///         freed guard.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_release(
    guard: *const ferrolock_guard,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            let g = GUARDS.get(guard)?;
            blocking::block_on(async move { g.release().await })
        })
    }
}

/// Extend the lease to `ttl_ms` from now (owner-checked in Redis).
///
/// @return ::FERROLOCK_RESULT_OK; ::FERROLOCK_RESULT_LOST if the local deadline passed or Redis
///         no longer holds the lock for this owner; ::FERROLOCK_RESULT_NOT_HELD after release;
///         ::FERROLOCK_RESULT_INVALID_DURATION for a bad TTL.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_extend(
    guard: *const ferrolock_guard,
    ttl_ms: u64,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            let g = GUARDS.get(guard)?;
            blocking::block_on(async move { g.extend(Duration::from_millis(ttl_ms)).await })
        })
    }
}

/// The fencing token of the hold: strictly increasing across grants of the lock name; re-entry
/// and renewal keep it. Pass it to the resource you write; it must reject lower tokens.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_fence(
    guard: *const ferrolock_guard,
    out_fence: *mut u64,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_fence, "out_fence")?;
            write(out_fence, GUARDS.get(guard)?.fence());
            Ok(())
        })
    }
}

/// The reentrancy depth of the hold this guard belongs to (0 once released or lost).
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_count(
    guard: *const ferrolock_guard,
    out_count: *mut u32,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_count, "out_count")?;
            write(out_count, GUARDS.get(guard)?.count());
            Ok(())
        })
    }
}

/// Milliseconds left until the local deadline (0 once lost or released). Monotonic clock.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_remaining_ms(
    guard: *const ferrolock_guard,
    out_ms: *mut u64,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_ms, "out_ms")?;
            let ms = GUARDS.get(guard)?.remaining().as_millis();
            write(out_ms, u64::try_from(ms).unwrap_or(u64::MAX));
            Ok(())
        })
    }
}

/// The hold's state (the polled form of the loss signal). A passed local deadline is noticed
/// here even before the watchdog does.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_state(
    guard: *const ferrolock_guard,
    out_state: *mut ferrolock_lock_state,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_state, "out_state")?;
            let s = match GUARDS.get(guard)?.state() {
                LockState::Held => ferrolock_lock_state::Held,
                LockState::InDoubt => ferrolock_lock_state::InDoubt,
                LockState::Released => ferrolock_lock_state::Released,
                _ => ferrolock_lock_state::Lost,
            };
            write(out_state, s);
            Ok(())
        })
    }
}

/// ::FERROLOCK_RESULT_OK if still held with more than `margin_ms` of validity left;
/// ::FERROLOCK_RESULT_LOST (or ::FERROLOCK_RESULT_NOT_HELD after release) otherwise. Call it
/// before each write that relies on the lock.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_ensure(
    guard: *const ferrolock_guard,
    margin_ms: u64,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe { call(out_error, || GUARDS.get(guard)?.ensure(Duration::from_millis(margin_ms))) }
}

/// Block until the hold is lost, this guard is released (by another thread), or `timeout_ms`
/// elapses.
///
/// @param out_lost receives true if the hold was lost, false when the timeout elapsed first.
/// @return ::FERROLOCK_RESULT_OK; ::FERROLOCK_RESULT_NOT_HELD, at once, when this guard is
///         released, before the call or during it (a released hold is never lost: a thread
///         watching for the loss is told instead of sleeping out its timeout);
///         ::FERROLOCK_RESULT_CLOSED for a freed guard.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_wait_lost(
    guard: *const ferrolock_guard,
    timeout_ms: u64,
    out_lost: *mut bool,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_lost, "out_lost")?;
            let g = GUARDS.get(guard)?;
            let timeout = Duration::from_millis(timeout_ms);
            let ended =
                blocking::block_on(async move { tokio::time::timeout(timeout, g.ended()).await.ok() });
            if ended == Some(LockState::Released) {
                return Err(Error::new(ferrolock::ErrorKind::NotHeld, "the guard was released"));
            }
            write(out_lost, ended == Some(LockState::Lost));
            Ok(())
        })
    }
}

/// Register `callback` to be told, once, how this guard's level of the hold ends (see
/// ::ferrolock_lost_callback). If the hold is already lost, or this level released, the callback
/// is called at once (on a library thread). `user_data` is passed back untouched; it must be safe to use
/// from another thread until the callback has been called.
///
/// @return ::FERROLOCK_RESULT_OK once registered; ::FERROLOCK_RESULT_NULL_ARGUMENT if `callback`
///         is NULL, ::FERROLOCK_RESULT_CLOSED for a freed guard. On any failure the callback is
///         never called: `user_data` stays the caller's to free.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_guard_on_lost(
    guard: *const ferrolock_guard,
    callback: ferrolock_lost_callback,
    user_data: *mut c_void,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            let cb =
                callback.ok_or_else(|| Error::new(ferrolock::ErrorKind::NullArgument, "callback is NULL"))?;
            let g = GUARDS.get(guard)?;
            let notify = LostNotify { cb, user_data, called: false };
            g.on_lost(move |e| notify.fire(Some(&e)));
            Ok(())
        })
    }
}

/// Free a guard handle. NULL, or a handle already freed, is a no-op. Does not release the lock
/// in Redis (see ::ferrolock_guard).
#[unsafe(no_mangle)]
pub extern "C" fn ferrolock_guard_free(guard: *mut ferrolock_guard) {
    catch((), || GUARDS.remove(guard))
}
