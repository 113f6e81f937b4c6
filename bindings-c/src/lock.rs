//! Lock handles: one named lock with its own owner token.

use std::time::Duration;

use ferrolock::{Error, ErrorKind, LockOptions, blocking};

use crate::boundary::{bytes, call, catch, non_null, write};
use crate::cancel::{CANCELS, ferrolock_cancel};
use crate::client::{CLIENTS, ferrolock_client};
use crate::error::ferrolock_error;
use crate::guard::{GUARDS, ferrolock_guard};
use crate::handles::Table;
use crate::result::ferrolock_result;

/// One named lock with its own owner token (opaque handle). Acquiring again through the same
/// handle re-enters (same fence, count + 1); another handle, even for the same name, contends.
/// Thread-safe. Made by ferrolock_lock_new(), freed by ferrolock_lock_free().
#[derive(Debug)]
pub struct ferrolock_lock {
    _opaque: [u8; 0],
}

pub(crate) static LOCKS: Table<ferrolock::Lock> = Table::new("lock");

/// Values of ferrolock_lock_options::renew.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferrolock_renew {
    /// Renew exactly when no TTL is given (ttl_ms = 0: a watchdog-renewed lease).
    Default = 0,
    /// Keep the lease alive in the background (every ttl / 3) until release.
    Always = 1,
    /// A fixed lease: the hold expires ttl_ms (0: the client's watchdog_ttl_ms) after each
    /// acquire or extend.
    Never = 2,
}

/// Lock options. Zero-initialise for the defaults (a lease of the client's watchdog TTL,
/// renewed until release).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ferrolock_lock_options {
    /// Lease length in ms; 0: the client's watchdog TTL. Must leave a validity of at least 2 ms
    /// after the clock-drift allowance, and be at most one year.
    pub ttl_ms: u64,
    /// One of ::ferrolock_renew (as an integer; other values give INVALID_ARGUMENT).
    pub renew: u32,
    /// 1: fair mode (waiters queue on the server and each release hands the lock to the oldest
    /// one; INVALID_CONFIG on a Redlock client or with replica acks); 0: off. Other values give
    /// INVALID_ARGUMENT.
    pub fair: u32,
}

fn to_options(o: Option<&ferrolock_lock_options>) -> Result<LockOptions, Error> {
    let Some(o) = o else { return Ok(LockOptions::default()) };
    let fair = match o.fair {
        0 => false,
        1 => true,
        _ => return Err(Error::new(ErrorKind::InvalidArgument, "fair must be 0 or 1")),
    };
    Ok(ttl_and_renew(o)?.with_fair(fair))
}

fn ttl_and_renew(o: &ferrolock_lock_options) -> Result<LockOptions, Error> {
    let renew = match o.renew {
        0 => None,
        1 => Some(true),
        2 => Some(false),
        _ => return Err(Error::new(ErrorKind::InvalidArgument, "renew must be one of ferrolock_renew")),
    };
    // ttl_ms 0: the client's watchdog_ttl_ms (with FERROLOCK_RENEW_NEVER a fixed lease of that
    // length, as `renew=False` without a ttl gives in Python and Node).
    let mut opts = LockOptions::default();
    opts.ttl = (o.ttl_ms != 0).then(|| Duration::from_millis(o.ttl_ms));
    opts.renew = renew;
    Ok(opts)
}

/// Make a lock handle for `name` (no I/O). The name is any bytes, 1 to the client's
/// `max_name_len` long.
///
/// @param name NULL only with name_len 0 (which gives ::FERROLOCK_RESULT_INVALID_NAME).
/// @param options NULL for the defaults.
/// @return ::FERROLOCK_RESULT_OK, ::FERROLOCK_RESULT_INVALID_NAME,
///         ::FERROLOCK_RESULT_INVALID_DURATION, ::FERROLOCK_RESULT_CLOSED (freed client), …
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_lock_new(
    client: *const ferrolock_client,
    name: *const u8,
    name_len: usize,
    options: *const ferrolock_lock_options,
    out_lock: *mut *mut ferrolock_lock,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_lock, "out_lock")?;
            let c = CLIENTS.get(client)?;
            let name = bytes(name, name_len, "name")?;
            let opts = to_options(options.as_ref())?;
            let lock = c.as_async().lock(name, opts)?;
            write(out_lock, LOCKS.insert(lock));
            Ok(())
        })
    }
}

/// Free a lock handle. NULL, or a handle already freed, is a no-op. Guards acquired through it
/// stay usable until they are freed.
#[unsafe(no_mangle)]
pub extern "C" fn ferrolock_lock_free(lock: *mut ferrolock_lock) {
    catch((), || LOCKS.remove(lock))
}

fn wait_of(wait_ms: i64) -> Option<Duration> {
    u64::try_from(wait_ms).ok().map(Duration::from_millis)
}

/// Acquire, blocking the calling thread for at most `wait_ms` milliseconds (negative: without
/// bound; 0: one attempt), plus, against a server that does not answer, the response timeouts
/// of the attempt in flight and of its undo (3 s for a 500 ms wait with the default 1 s timeout;
/// docs/GUARANTEES.md). Waiting is driven by release notifications, not polling. A wait that
/// ended while attempts were failing (the server down) returns ::FERROLOCK_RESULT_ACQUIRE_TIMEOUT
/// whose message quotes the last failure ("the last attempt failed: CONNECTION: …").
///
/// @param out_guard receives a new guard (one level of hold) on success.
/// @return ::FERROLOCK_RESULT_OK, ::FERROLOCK_RESULT_ACQUIRE_TIMEOUT when the wait elapsed,
///         ::FERROLOCK_RESULT_INVALID_DURATION for a `wait_ms` over one year,
///         ::FERROLOCK_RESULT_REENTRANCY_LIMIT, ::FERROLOCK_RESULT_CONNECTION, …
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_lock_acquire(
    lock: *const ferrolock_lock,
    wait_ms: i64,
    out_guard: *mut *mut ferrolock_guard,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe { ferrolock_lock_acquire_cancellable(lock, wait_ms, std::ptr::null(), out_guard, out_error) }
}

/// As ferrolock_lock_acquire(), and also stops with ::FERROLOCK_RESULT_CANCELLED as soon as
/// `cancel` is triggered (from any thread). An attempt interrupted mid-flight is undone in Redis
/// (compare-and-delete with this handle's token), so a cancelled acquire never leaves a hold.
///
/// @param cancel a token from ferrolock_cancel_new(), or NULL for none.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_lock_acquire_cancellable(
    lock: *const ferrolock_lock,
    wait_ms: i64,
    cancel: *const ferrolock_cancel,
    out_guard: *mut *mut ferrolock_guard,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_guard, "out_guard")?;
            let l = LOCKS.get(lock)?;
            let wait = wait_of(wait_ms);
            let guard = if cancel.is_null() {
                blocking::block_on(async move { l.acquire(wait).await })?
            } else {
                let cancelled = triggered(cancel)?;
                // CANCELLED, quoting the last attempt's failure if the attempts failed.
                blocking::block_on(async move { l.acquire_cancellable(wait, cancelled).await })?
            };
            write(out_guard, GUARDS.insert(guard));
            Ok(())
        })
    }
}

/// Resolves once `cancel` is triggered (never if the token is freed first); CLOSED for a token
/// already freed.
fn triggered(cancel: *const ferrolock_cancel) -> Result<impl Future<Output = ()> + Send + 'static, Error> {
    let mut rx = CANCELS.get(cancel)?.subscribe();
    Ok(async move {
        if rx.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await; // token freed: never fires
        }
    })
}

/// One attempt without waiting. On success `*out_guard` is a new guard, or NULL when another
/// owner holds the lock (still ::FERROLOCK_RESULT_OK). Against a server that does not answer it
/// returns after up to about four response timeouts (docs/CONNECTIONS.md).
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_lock_try_acquire(
    lock: *const ferrolock_lock,
    out_guard: *mut *mut ferrolock_guard,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe { ferrolock_lock_try_acquire_cancellable(lock, std::ptr::null(), out_guard, out_error) }
}

/// As ferrolock_lock_try_acquire(), and also stops with ::FERROLOCK_RESULT_CANCELLED as soon as
/// `cancel` is triggered (from any thread), also before the attempt: the attempt is one request,
/// but a server that stops answering holds it for the client's response timeouts (up to about
/// four, docs/CONNECTIONS.md). An attempt interrupted mid-flight is undone in Redis, so a
/// cancelled attempt never leaves a hold.
///
/// @param cancel a token from ferrolock_cancel_new(), or NULL for none.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_lock_try_acquire_cancellable(
    lock: *const ferrolock_lock,
    cancel: *const ferrolock_cancel,
    out_guard: *mut *mut ferrolock_guard,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_guard, "out_guard")?;
            let l = LOCKS.get(lock)?;
            let guard = if cancel.is_null() {
                blocking::block_on(async move { l.try_acquire().await })?
            } else {
                let cancelled = triggered(cancel)?;
                blocking::block_on(async move {
                    tokio::select! {
                        biased;
                        // Dropping the attempt undoes it, as for a cancelled acquire.
                        () = cancelled => Err(Error::new(ErrorKind::Cancelled, "the attempt was cancelled")),
                        r = l.try_acquire() => r,
                    }
                })?
            };
            let handle = guard.map_or(std::ptr::null_mut(), |g| GUARDS.insert(g));
            write(out_guard, handle);
            Ok(())
        })
    }
}
