//! The synchronous facade: the same surface as the async API, for plain threads and FFI.
//!
//! One lazily built **current-thread** runtime runs every client made here: their connections,
//! watchdogs and notification handling, and every call. A call drives that runtime from the
//! calling thread itself (`block_on`): the connection's driver task, which does the socket I/O,
//! runs right there, so a call costs one wait per round trip, like the async API. (Spawning the
//! call onto a worker and waiting for its result costs a hop there and one back, 3 context
//! switches per call on one core; running the future on the caller's thread while another
//! thread drives the connection costs two hops per round trip.)
//!
//! Between calls a background thread drives the runtime (renewals, release notifications,
//! tasks spawned onto [`runtime`]). It steps off when a call starts and comes back once no call
//! has started for [`IDLE`] (at once for spawned work when no caller drives), so in a loop of
//! calls it wakes once per millisecond instead of twice per call. Calls made from inside
//! another tokio runtime are spawned and waited for instead, and do not panic.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::hold::LockState;
use crate::options::{ClientOptions, LockOptions};

pub use crate::client::LockInfo;

/// How long the background thread stays off the runtime after a call started: background work
/// waits at most about twice this while calls come and go.
const IDLE: Duration = Duration::from_millis(1);

struct Driver {
    rt: tokio::runtime::Runtime,
    state: Mutex<DriveState>,
    /// Wakes the background thread while it is off the runtime.
    idle: Condvar,
    /// Makes the background thread get off the runtime.
    step_off: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct DriveState {
    /// Calls inside `block_on` now.
    callers: usize,
    /// Calls started so far (the background thread watches it move).
    calls: u64,
    /// Spawned-and-waited calls still running (nobody drives them with `block_on`).
    detached: usize,
    /// The background thread is on the runtime (and has not been asked to step off).
    bg_driving: bool,
    /// The background thread should come back now.
    kicked: bool,
}

impl Driver {
    fn lock(&self) -> MutexGuard<'_, DriveState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drive the runtime from this thread until `fut` completes; `None` if it panicked.
    fn drive<F: Future>(&self, fut: F) -> Option<F::Output> {
        {
            let mut st = self.lock();
            st.callers += 1;
            st.calls = st.calls.wrapping_add(1);
            if st.bg_driving {
                st.bg_driving = false;
                self.step_off.notify_one();
            }
        }
        struct Leave<'a>(&'a Driver);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                let mut st = self.0.lock();
                st.callers -= 1;
                if st.callers == 0 && st.detached > 0 {
                    st.kicked = true;
                    self.0.idle.notify_one();
                }
            }
        }
        let _leave = Leave(self);
        std::panic::catch_unwind(AssertUnwindSafe(|| self.rt.block_on(fut))).ok()
    }

    /// Spawn `fut` and wait for it on a channel (for threads inside another runtime).
    fn spawn_and_wait<F>(&'static self, fut: F) -> Option<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        struct Done(&'static Driver);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.lock().detached -= 1;
            }
        }
        {
            let mut st = self.lock();
            st.detached += 1;
            if st.callers == 0 && !st.bg_driving {
                st.kicked = true;
                self.idle.notify_one();
            }
        }
        let done = Done(self);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.rt.spawn(async move {
            let _done = done;
            let _ = tx.send(fut.await);
        });
        rx.recv().ok()
    }

    /// The background thread: drives the runtime whenever no call does.
    fn background(&'static self) {
        let mut st = self.lock();
        loop {
            st.bg_driving = true;
            drop(st);
            self.rt.block_on(self.step_off.notified());
            st = self.lock();
            // A call asked us off (and cleared `bg_driving`). Come back once none has started
            // for IDLE, or at once for spawned-and-waited calls when no caller drives them.
            let mut seen = st.calls;
            loop {
                st = match self.idle.wait_timeout(st, IDLE) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                };
                if st.callers == 0 && (st.kicked || st.detached > 0 || st.calls == seen) {
                    st.kicked = false;
                    break;
                }
                seen = st.calls;
            }
        }
    }
}

static DRIVER: OnceLock<&'static Driver> = OnceLock::new();

fn driver() -> &'static Driver {
    DRIVER.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .thread_name("ferrolock")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("ferrolock: cannot build the blocking runtime: {e}"));
        let d: &'static Driver = Box::leak(Box::new(Driver {
            rt,
            state: Mutex::new(DriveState::default()),
            idle: Condvar::new(),
            step_off: tokio::sync::Notify::new(),
        }));
        std::thread::Builder::new()
            .name("ferrolock".into())
            .spawn(move || d.background())
            .unwrap_or_else(|e| panic!("ferrolock: cannot start the blocking runtime's thread: {e}"));
        d
    })
}

/// The facade's runtime (built on first use). Tasks spawned onto it are driven by the
/// background thread (within about 2 ms while blocking calls keep it off the runtime).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    &driver().rt
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
    if tokio::runtime::Handle::try_current().is_ok() { d.spawn_and_wait(fut) } else { d.drive(fut) }
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

    /// Block until the hold is lost or `timeout` elapses; true if lost.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let g = self.inner.clone();
        block_on(async move { tokio::time::timeout(timeout, g.lost()).await.is_ok() })
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
