//! `Lock`: a handle on one named lock with its own owner token; `CancelToken` for abortable waits.

use napi::Env;
use napi::bindgen_prelude::{External, PromiseRaw};

use crate::driver;
use napi_derive::napi;
use tokio::sync::watch;

use crate::convert;
use crate::held::Held;
use crate::reply::Reply;

/// A handle on one named lock. Acquiring again through the same handle re-enters (same fence,
/// count + 1); another handle, even on the same name, contends.
#[napi]
#[derive(Debug)]
pub struct Lock {
    inner: ferrolock::Lock,
}

impl Lock {
    pub fn new(inner: ferrolock::Lock) -> Self {
        Lock { inner }
    }
}

#[napi]
impl Lock {
    /// The lock's name (bytes that are not UTF-8 are shown replaced).
    #[napi(getter)]
    pub fn name(&self) -> String {
        String::from_utf8_lossy(self.inner.name()).into_owned()
    }

    /// The lease of each grant, in milliseconds.
    #[napi(getter)]
    pub fn ttl(&self) -> f64 {
        convert::to_millis(self.inner.ttl())
    }

    /// One attempt, no waiting: the hold, or `null` when another owner holds the lock.
    #[napi(ts_return_type = "Promise<Held | null>")]
    pub fn try_acquire<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Reply<Option<Held>>>> {
        let lock = self.inner.clone();
        driver::promise(env, async move { Reply(lock.try_acquire().await.map(|g| g.map(Held::new))) })
    }

    /// The native acquire behind `acquire({ wait, signal })` in index.js: waits at most `wait`
    /// ms (`null`: without bound); `cancel` ends the wait with `CANCELLED`. Dropping the core's
    /// acquire future undoes any grant it may have made.
    #[napi(skip_typescript, js_name = "_acquire")]
    pub fn acquire_native<'env>(
        &self,
        env: &'env Env,
        wait: Option<f64>,
        cancel: Option<&External<CancelToken>>,
    ) -> napi::Result<PromiseRaw<'env, Reply<Held>>> {
        let lock = self.inner.clone();
        let wait = convert::opt_millis("wait", wait);
        let mut cancelled = cancel.map(|c| c.tx.subscribe());
        driver::promise(env, async move {
            let wait = match wait {
                Ok(w) => w,
                Err(e) => return Reply::err(e),
            };
            let r = match cancelled.as_mut() {
                None => lock.acquire(wait).await,
                // The core's cancellable acquire: an abort after failed attempts (a server that
                // does not answer) quotes the last failure, as a wait that elapses does.
                Some(rx) => {
                    let aborted = async {
                        if rx.wait_for(|c| *c).await.is_err() {
                            std::future::pending::<()>().await; // token gone: never aborted
                        }
                    };
                    lock.acquire_cancellable(wait, aborted).await
                }
            };
            Reply(r.map(Held::new))
        })
    }
}

/// Ends pending native acquires: `index.js` wires an `AbortSignal` to one. Reaches JS only as an
/// opaque external value (not part of the typed API).
#[derive(Debug)]
pub struct CancelToken {
    tx: watch::Sender<bool>,
}

/// A new cancel token (internal to index.js).
#[napi(skip_typescript, js_name = "_cancelToken")]
pub fn cancel_token() -> External<CancelToken> {
    External::new(CancelToken { tx: watch::Sender::new(false) })
}

/// Cancel every acquire given this token, now and later (internal to index.js).
#[napi(skip_typescript, js_name = "_cancel")]
pub fn cancel(token: &External<CancelToken>) {
    token.tx.send_replace(true);
}
