//! The synchronous facade: the same surface as the async API, for plain threads and FFI.
//!
//! One lazily built [`Driver`] runs every client made here: their
//! connections, watchdogs and notification handling, and every call. A call drives that
//! current-thread runtime from the calling thread itself, so it costs one wait per round trip,
//! like the async API; between calls a background thread drives it (see [`crate::driver`]).
//! Calls made from inside another tokio runtime are spawned and waited for instead, and do not
//! panic.
//!
//! After `fork()` the child gets a driver of its own on first use (the parent's threads do not
//! exist there; the inherited driver is leaked, never driven). Objects made in the parent are not
//! usable in the child: bindings that can be forked (the C API) refuse them there.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use crate::driver::Driver;
use crate::error::{Error, ErrorKind, Result};
use crate::hold::LockState;
use crate::options::{ClientOptions, LockOptions};

pub use crate::client::LockInfo;

/// The driver of the process that built it.
struct ProcessDriver {
    pid: u32,
    driver: &'static Driver,
    /// The parent's, in a forked child: kept reachable (leak checkers), never used.
    _inherited: *const ProcessDriver,
}

static DRIVER: AtomicPtr<ProcessDriver> = AtomicPtr::new(std::ptr::null_mut());

fn driver() -> &'static Driver {
    let pid = crate::driver::process_id();
    let cur = DRIVER.load(Ordering::Acquire);
    // SAFETY: pointers stored in DRIVER come from Box::leak and are never freed.
    if let Some(p) = unsafe { cur.as_ref() }
        && p.pid == pid
    {
        return p.driver;
    }
    let driver = Driver::start("ferrolock")
        .unwrap_or_else(|e| panic!("ferrolock: cannot start the blocking runtime: {e}"));
    let new: *mut ProcessDriver = Box::leak(Box::new(ProcessDriver { pid, driver, _inherited: cur }));
    match DRIVER.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => driver,
        // Another thread built one first: use it (ours stays unused; rare and bounded).
        // SAFETY: as above.
        Err(other) => unsafe { other.as_ref() }.filter(|p| p.pid == pid).map_or(driver, |p| p.driver),
    }
}

/// The facade's runtime (built on first use). Tasks spawned onto it are driven by the
/// background thread (within about 8 ms while blocking calls keep it off the runtime).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    driver().runtime()
}

/// Run `fut` to completion on the facade's runtime, from any thread (also from inside another
/// tokio runtime, whose thread it blocks meanwhile).
pub fn block_on<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match wait(fut) {
        Some(v) => v,
        None => panic!("ferrolock: a blocking call's task panicked"),
    }
}

fn wait<F>(fut: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let d = driver();
    if tokio::runtime::Handle::try_current().is_ok() {
        d.spawn_and_wait(fut)
    } else {
        std::panic::catch_unwind(AssertUnwindSafe(|| d.drive(fut))).ok()
    }
}

fn run<T: Send + 'static>(fut: impl Future<Output = Result<T>> + Send + 'static) -> Result<T> {
    wait(fut).unwrap_or_else(|| Err(Error::new(ErrorKind::Internal, "a blocking call's task panicked")))
}

/// Blocking [`crate::Client`].
#[derive(Clone, Debug)]
pub struct Client {
    inner: crate::Client,
}

impl Client {
    /// Connect (see [`crate::Client::connect`]).
    pub fn connect(url: &str, opts: ClientOptions) -> Result<Client> {
        let url = url.to_owned();
        run(async move { crate::Client::connect(&url, opts).await }).map(|inner| Client { inner })
    }

    /// Connect to N independent masters for Redlock (see [`crate::Client::connect_redlock`]).
    pub fn connect_redlock<I>(urls: I, opts: ClientOptions) -> Result<Client>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        run(async move { crate::Client::connect_redlock(&urls, opts).await }).map(|inner| Client { inner })
    }

    /// Whether this client locks by quorum (see [`crate::Client::is_redlock`]).
    pub fn is_redlock(&self) -> bool {
        self.inner.is_redlock()
    }

    /// A lock handle (no I/O).
    pub fn lock(&self, name: impl AsRef<[u8]>, opts: LockOptions) -> Result<Lock> {
        self.inner.lock(name, opts).map(|inner| Lock { inner })
    }

    /// See [`crate::Client::inspect`].
    pub fn inspect(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        let (c, n) = (self.inner.clone(), name.as_ref().to_vec());
        run(async move { c.inspect(n).await })
    }

    /// See [`crate::Client::force_unlock`].
    pub fn force_unlock(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        let (c, n) = (self.inner.clone(), name.as_ref().to_vec());
        run(async move { c.force_unlock(n).await })
    }

    /// Close the client (see [`crate::Client::close`]): pending acquires end with `CLOSED`,
    /// live holds become lost and are left to expire, later calls fail with `CLOSED`. Never
    /// blocks.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Whether the client was closed.
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// The async client behind this facade.
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }
}

/// Blocking [`crate::Lock`].
#[derive(Clone, Debug)]
pub struct Lock {
    inner: crate::Lock,
}

impl Lock {
    /// See [`crate::Lock::acquire`].
    pub fn acquire(&self, wait: Option<Duration>) -> Result<Guard> {
        let l = self.inner.clone();
        run(async move { l.acquire(wait).await }).map(|g| Guard { inner: Arc::new(g) })
    }

    /// See [`crate::Lock::try_acquire`].
    pub fn try_acquire(&self) -> Result<Option<Guard>> {
        let l = self.inner.clone();
        run(async move { l.try_acquire().await }).map(|g| g.map(|g| Guard { inner: Arc::new(g) }))
    }

    /// The lock's name.
    pub fn name(&self) -> &[u8] {
        self.inner.name()
    }
}

/// Blocking [`crate::Guard`].
#[derive(Debug)]
pub struct Guard {
    inner: Arc<crate::Guard>,
}

impl Guard {
    /// See [`crate::Guard::release`].
    pub fn release(&self) -> Result<()> {
        let g = self.inner.clone();
        run(async move { g.release().await })
    }

    /// See [`crate::Guard::extend`].
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        let g = self.inner.clone();
        run(async move { g.extend(ttl).await })
    }

    /// See [`crate::Guard::fence`].
    pub fn fence(&self) -> u64 {
        self.inner.fence()
    }

    /// See [`crate::Guard::count`].
    pub fn count(&self) -> u32 {
        self.inner.count()
    }

    /// See [`crate::Guard::remaining`].
    pub fn remaining(&self) -> Duration {
        self.inner.remaining()
    }

    /// See [`crate::Guard::ensure`].
    pub fn ensure(&self, margin: Duration) -> Result<()> {
        self.inner.ensure(margin)
    }

    /// See [`crate::Guard::state`].
    pub fn state(&self) -> LockState {
        self.inner.state()
    }

    /// Block until the hold is lost or `timeout` elapses; true if lost. Returns false at once
    /// when this guard is released, also by another thread during the wait (a released hold is
    /// never lost: see [`crate::Guard::ended`]).
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let g = self.inner.clone();
        block_on(async move { tokio::time::timeout(timeout, g.ended()).await == Ok(LockState::Lost) })
    }

    /// See [`crate::Guard::on_lost`].
    pub fn on_lost(&self, cb: impl FnOnce(Error) + Send + 'static) {
        self.inner.on_lost(cb)
    }

    /// The async guard behind this facade.
    pub fn as_async(&self) -> &crate::Guard {
        &self.inner
    }
}
