//! `Held`: one level of a hold (the core's `Guard`).

use std::sync::Arc;

use napi::Env;
use napi::bindgen_prelude::{Function, PromiseRaw, ToNapiValue};
use napi::sys;
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;

use crate::reply::{Reply, to_js_error};
use crate::{convert, driver};

/// Proof of one level of hold. `release()` it (or use `await using` / `client.withLock`);
/// a collected `Held` never releases in Redis: renewal stops and the lease runs out.
#[napi]
#[derive(Debug)]
pub struct Held {
    guard: Arc<ferrolock::Guard>,
}

impl Held {
    pub fn new(guard: ferrolock::Guard) -> Self {
        Held { guard: Arc::new(guard) }
    }
}

impl crate::reply::Undelivered for Held {
    fn undelivered(self) {
        self.guard.release_detached();
    }

    fn outlived(&self) -> bool {
        self.guard.lock().is_closed()
    }
}

/// The error handed to a loss callback, built on the JS thread.
#[derive(Debug)]
pub struct LostError(ferrolock::Error);

impl ToNapiValue for LostError {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        // SAFETY: called by napi on the JS thread with a live env.
        let e = unsafe { to_js_error(env, &val.0) };
        // SAFETY: the error refers to a value created in this env just above.
        Ok(unsafe { napi::JsError::from(e).into_value(env) })
    }
}

#[napi]
impl Held {
    /// The fencing token: strictly increasing across grants of this lock name; re-entry and
    /// renewal keep it. A JS number: tokens stay below 2^53 (server microseconds), so they are
    /// exact. Pass it to the resource you write, which must reject lower tokens.
    #[napi(getter)]
    pub fn fence(&self) -> f64 {
        self.guard.fence() as f64
    }

    /// This handle's reentrancy depth (0 once released or lost).
    #[napi(getter)]
    pub fn count(&self) -> u32 {
        self.guard.count()
    }

    /// `"held"`, `"in_doubt"` (a renewal failed; still within the deadline), `"lost"` or
    /// `"released"`.
    #[napi(getter, ts_return_type = "'held' | 'in_doubt' | 'lost' | 'released'")]
    pub fn state(&self) -> String {
        self.guard.state().name().to_owned()
    }

    /// Milliseconds left until the local deadline (0 once lost or released).
    #[napi]
    pub fn remaining(&self) -> f64 {
        convert::to_millis(self.guard.remaining())
    }

    /// Throws `LOST` unless still held with more than `margin` ms of validity left (`NOT_HELD`
    /// once released). Call it before each step that needs the lock.
    #[napi(ts_args_type = "margin?: number", ts_return_type = "void")]
    pub fn ensure(&self, margin: Option<f64>) -> Reply<()> {
        Reply(convert::millis("margin", margin.unwrap_or(0.0)).and_then(|m| self.guard.ensure(m)))
    }

    /// Release one level (at depth 0 the lock is deleted and waiters wake). Rejects with
    /// `NOT_HELD` if this `Held` was already released, `LOST` if the hold was lost meanwhile.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Reply<()>>> {
        // Made here, not inside the task: a close() later in this turn leaves it to be sent.
        let release = self.guard.release_shared();
        driver::promise(env, async move { Reply(release.await) })
    }

    /// `await using held = await lock.acquire()`: releases this level unless it was already
    /// released (then a no-op). Rejects with `LOST` if the hold was lost before the release.
    #[napi(well_known_symbol = "asyncDispose", ts_return_type = "Promise<void>")]
    pub fn dispose<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Reply<()>>> {
        let release = self.guard.release_shared();
        driver::promise(env, async move {
            match release.await {
                Err(e) if e.kind() == ferrolock::ErrorKind::NotHeld => Reply(Ok(())),
                r => Reply(r),
            }
        })
    }

    /// Extend the lease to `ttl` ms from now (owner-checked). Rejects with `LOST` if it was lost.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn extend<'env>(&self, env: &'env Env, ttl: f64) -> napi::Result<PromiseRaw<'env, Reply<()>>> {
        let (guard, ttl) = (self.guard.clone(), convert::millis("ttl", ttl));
        driver::promise(env, async move {
            match ttl {
                Ok(t) => Reply(guard.extend(t).await),
                Err(e) => Reply::err(e),
            }
        })
    }

    /// The native loss hook behind `onLost`/`signal` in index.js: `callback` runs once, on the JS
    /// thread, with a `LOST` error; never after a release. Does not keep the process alive.
    #[napi(skip_typescript, js_name = "_onLost")]
    pub fn on_lost_native(&self, callback: Function<'_, LostError, ()>) -> napi::Result<()> {
        let tsfn = callback.build_threadsafe_function().callee_handled::<false>().weak::<true>().build()?;
        self.guard.on_lost(move |e| {
            tsfn.call(LostError(e), ThreadsafeFunctionCallMode::NonBlocking);
        });
        Ok(())
    }
}
