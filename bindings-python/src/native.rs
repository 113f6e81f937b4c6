//! The native classes behind `ferrolock.Client` / `Lock` / `AsyncHeld`: one core object each,
//! every call a direct translation. The sync owners and `Held` are in `held.rs`; the asyncio
//! owners (per task) live in the Python layer.

use std::sync::Arc;
use std::time::Duration;

use ferrolock::{Client, ClientOptions, Guard, Lock, LockInfo, LockOptions};
use pyo3::prelude::*;
use pyo3::pyclass::{PyTraverseError, PyVisit};
use pyo3::types::{PyBytes, PyDict};

use crate::runtime::{ProcessLocal, future, wait, with_python};
use crate::{convert, errors, logging};

async fn connect_core(url: String, opts: ClientOptions) -> ferrolock::Result<Client> {
    Client::connect(&url, opts).await
}

/// Connect to one Redis server (blocking, GIL released).
#[pyfunction]
#[pyo3(signature = (url, options = None))]
pub fn connect(py: Python<'_>, url: String, options: Option<&Bound<'_, PyDict>>) -> PyResult<NativeClient> {
    let opts = convert::client_options(options)?;
    let client = wait(py, connect_core(url, opts))?;
    Ok(NativeClient::new(client))
}

/// Connect to one Redis server; returns an awaitable.
#[pyfunction]
#[pyo3(signature = (url, options = None))]
pub fn connect_async<'py>(
    py: Python<'py>,
    url: String,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = convert::client_options(options)?;
    future(py, connect_core(url, opts), |py, client| Ok(Py::new(py, NativeClient::new(client))?.into_any()))
}

async fn connect_redlock_core(urls: Vec<String>, opts: ClientOptions) -> ferrolock::Result<Client> {
    Client::connect_redlock(urls, opts).await
}

fn urls_of(urls: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if urls.is_instance_of::<pyo3::types::PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "Redlock takes a list of URLs (one per independent master), not one string",
        ));
    }
    urls.try_iter()?.map(|u| u.and_then(|u| u.extract::<String>())).collect()
}

/// Connect to N independent masters for Redlock (blocking, GIL released).
#[pyfunction]
#[pyo3(signature = (urls, options = None))]
pub fn connect_redlock(
    py: Python<'_>,
    urls: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<NativeClient> {
    let (urls, opts) = (urls_of(urls)?, convert::client_options(options)?);
    let client = wait(py, connect_redlock_core(urls, opts))?;
    Ok(NativeClient::new(client))
}

/// Connect to N independent masters for Redlock; returns an awaitable.
#[pyfunction]
#[pyo3(signature = (urls, options = None))]
pub fn connect_redlock_async<'py>(
    py: Python<'py>,
    urls: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (urls, opts) = (urls_of(urls)?, convert::client_options(options)?);
    future(py, connect_redlock_core(urls, opts), |py, client| {
        Ok(Py::new(py, NativeClient::new(client))?.into_any())
    })
}

/// A connection to one Redis server, or to N masters for Redlock (core `Client`).
#[derive(Debug)]
#[pyclass(frozen, module = "ferrolock._ferrolock")]
pub struct NativeClient {
    /// `None` once closed.
    inner: ProcessLocal<std::sync::Mutex<Option<Client>>>,
}

impl NativeClient {
    /// A core lock handle with a fresh owner token (no I/O): `lock`, and each thread's owner
    /// of a sync `Lock` (`held.rs`).
    pub(crate) fn core_lock(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        renew: Option<bool>,
        fair: bool,
    ) -> PyResult<Lock> {
        let name = convert::name(name)?;
        let mut opts = LockOptions::default().with_fair(fair);
        opts.ttl = convert::opt_duration(ttl, "ttl")?;
        opts.renew = renew;
        self.client(py)?.lock(name, opts).map_err(|e| errors::to_py(py, e))
    }

    fn new(client: Client) -> Self {
        NativeClient { inner: ProcessLocal::new(std::sync::Mutex::new(Some(client))) }
    }

    /// The core client, unless this one was closed (or made before `fork()` by the parent).
    fn client(&self, py: Python<'_>) -> PyResult<Client> {
        let c = self.inner.get(py)?.lock().unwrap_or_else(|p| p.into_inner()).clone();
        c.ok_or_else(|| errors::closed(py, "the client was closed"))
    }
}

fn info_to_py(py: Python<'_>, info: Option<LockInfo>) -> PyResult<Py<PyAny>> {
    match info {
        None => Ok(py.None()),
        Some(i) => Ok(Py::new(py, NativeLockInfo::from(i))?.into_any()),
    }
}

#[pymethods]
impl NativeClient {
    /// A lock handle with a fresh owner token (no I/O). `wait`, the lock's default wait, is
    /// only checked here (so that a bad one fails when the lock is made, not at its first
    /// acquire); the caller keeps it.
    #[pyo3(signature = (name, ttl = None, renew = None, fair = false, wait = None))]
    fn lock(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        renew: Option<bool>,
        fair: bool,
        wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<NativeLock> {
        convert::opt_duration(wait, "wait")?;
        Ok(NativeLock { inner: ProcessLocal::new(self.core_lock(py, name, ttl, renew, fair)?) })
    }

    /// Who holds `name`, if anyone.
    fn inspect(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Option<NativeLockInfo>> {
        let (c, n) = (self.client(py)?, convert::name(name)?);
        Ok(wait(py, async move { c.inspect(n).await })?.map(NativeLockInfo::from))
    }

    /// Awaitable `inspect`.
    fn inspect_async<'py>(&self, py: Python<'py>, name: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let (c, n) = (self.client(py)?, convert::name(name)?);
        future(py, async move { c.inspect(n).await }, info_to_py)
    }

    /// Delete whatever hold `name` has (administrative); returns what was removed.
    fn force_unlock(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Option<NativeLockInfo>> {
        let (c, n) = (self.client(py)?, convert::name(name)?);
        Ok(wait(py, async move { c.force_unlock(n).await })?.map(NativeLockInfo::from))
    }

    /// Awaitable `force_unlock`.
    fn force_unlock_async<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (c, n) = (self.client(py)?, convert::name(name)?);
        future(py, async move { c.force_unlock(n).await }, info_to_py)
    }

    /// Whether this client locks by quorum over several masters (Redlock).
    #[getter]
    fn is_redlock(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.client(py)?.is_redlock())
    }

    /// Close the client (core `Client::close`): a pending acquire of its locks raises
    /// `ClosedError`, live holds become lost (callbacks run) and are left to expire with no
    /// further renewal, and every later call on the client, its locks and holds raises
    /// `ClosedError`. Never blocks; closing twice is fine.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.get(py)?.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(move || {
            if let Some(c) = &taken {
                c.close();
            }
            drop(taken)
        });
        Ok(())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.inner.get(py).map(|m| m.lock().unwrap_or_else(|p| p.into_inner()).clone()) {
            // The core's Debug shows host, port and db only: never credentials.
            Ok(Some(c)) => format!("<ferrolock {c:?}>"),
            Ok(None) => "<ferrolock Client (closed)>".to_owned(),
            Err(_) => "<ferrolock Client (inherited across fork)>".to_owned(),
        }
    }
}

/// What `inspect` and `force_unlock` report about one lock.
#[derive(Debug)]
#[pyclass(frozen, module = "ferrolock._ferrolock", name = "LockInfo")]
pub struct NativeLockInfo {
    owner: Vec<u8>,
    /// The holder's reentrancy depth.
    #[pyo3(get)]
    count: u32,
    /// The hold's fencing token.
    #[pyo3(get)]
    fence: u64,
    ttl: Option<Duration>,
}

impl From<LockInfo> for NativeLockInfo {
    fn from(i: LockInfo) -> Self {
        NativeLockInfo { owner: i.owner, count: i.count, fence: i.fence, ttl: i.ttl }
    }
}

#[pymethods]
impl NativeLockInfo {
    /// The holder's owner token.
    #[getter]
    fn owner<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.owner)
    }

    /// Server-side seconds to expiry (`None`: no expiry, or unknown).
    #[getter]
    fn ttl(&self) -> Option<f64> {
        self.ttl.map(convert::seconds)
    }

    fn __repr__(&self) -> String {
        let ttl = self.ttl().map_or_else(|| "None".to_owned(), |t| format!("{t}"));
        format!("LockInfo(count={}, fence={}, ttl={ttl})", self.count, self.fence)
    }
}

/// One owner's handle on a named lock (core `Lock`): acquiring again re-enters.
#[derive(Debug)]
#[pyclass(frozen, module = "ferrolock._ferrolock")]
pub struct NativeLock {
    inner: ProcessLocal<Lock>,
}

/// A grant of an awaitable acquire, on its way to the event loop: released if it never gets
/// there (see [`NativeGuard::delivered`]).
fn guard_to_py(py: Python<'_>, g: Guard) -> PyResult<Py<PyAny>> {
    let guard = NativeGuard::new(g);
    guard.delivered.store(false, std::sync::atomic::Ordering::Release);
    Ok(Py::new(py, guard)?.into_any())
}

#[pymethods]
impl NativeLock {
    /// Acquire, waiting at most `wait` (None: without bound). GIL released while waiting.
    #[pyo3(signature = (wait = None))]
    fn acquire(&self, py: Python<'_>, wait: Option<&Bound<'_, PyAny>>) -> PyResult<NativeGuard> {
        let w = convert::opt_duration(wait, "wait")?;
        let l = self.inner.get(py)?.clone();
        let g = crate::runtime::wait(py, async move { l.acquire(w).await })?;
        Ok(NativeGuard::new(g))
    }

    /// One attempt; `None` when another owner holds the lock.
    fn try_acquire(&self, py: Python<'_>) -> PyResult<Option<NativeGuard>> {
        let l = self.inner.get(py)?.clone();
        let g = wait(py, async move { l.try_acquire().await })?;
        Ok(g.map(NativeGuard::new))
    }

    /// Awaitable `acquire`.
    #[pyo3(signature = (wait = None))]
    fn acquire_async<'py>(
        &self,
        py: Python<'py>,
        wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let w = convert::opt_duration(wait, "wait")?;
        let l = self.inner.get(py)?.clone();
        future(py, async move { l.acquire(w).await }, guard_to_py)
    }

    /// Awaitable `try_acquire`.
    fn try_acquire_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let l = self.inner.get(py)?.clone();
        future(py, async move { l.try_acquire().await }, |py, g| match g {
            Some(g) => guard_to_py(py, g),
            None => Ok(py.None()),
        })
    }

    /// The lock's name.
    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, self.inner.get(py)?.name()))
    }

    /// The lease of each grant, in seconds.
    #[getter]
    fn ttl(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(convert::seconds(self.inner.get(py)?.ttl()))
    }
}

/// The callable of one `on_lost` registration (`None` once called, dropped or cleared).
///
/// The guard that registered it owns the callable: the garbage collector sees it through the
/// guard's `__traverse__` and can drop it with `__clear__`, and it is dropped with the guard. The
/// closure handed to the core holds only a [`LostSlotRef`] to it. (Owned by that closure, the
/// callable was invisible to the GC: one that referred back to the hold, such as a bound method
/// of the object holding it, made a cycle the GC could not break, and the core guard, never
/// dropped, stayed renewed for as long as the client lived.)
///
/// Locked only briefly and never across a call into Python or a drop of the callable; a thread
/// without the GIL locks it only in [`LostSlotRef`]'s drop, so the GC's `__traverse__` (which
/// must not block) only tries the lock.
type LostSlot = Arc<std::sync::Mutex<Option<Py<PyAny>>>>;

fn try_lock<T>(m: &std::sync::Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The core's handle on a [`LostSlot`]: dropping it (the callback ran, or the core dropped it
/// because the level was released) drops the callable too, as when the core owned it.
struct LostSlotRef(LostSlot);

impl LostSlotRef {
    fn take(&self) -> Option<Py<PyAny>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Drop for LostSlotRef {
    fn drop(&mut self) {
        // Outside the lock (without the GIL, PyO3 defers the decref to the next attach).
        drop(self.take());
    }
}

/// One level of hold (core `Guard`).
#[derive(Debug)]
#[pyclass(frozen, module = "ferrolock._ferrolock")]
pub struct NativeGuard {
    inner: ProcessLocal<Arc<Guard>>,
    /// The callables of this guard's `on_lost` registrations (see [`LostSlot`]); only locked
    /// with the GIL held.
    lost_callbacks: std::sync::Mutex<Vec<LostSlot>>,
    /// Whether the grant reached its caller. An awaitable acquire's grant is set on its asyncio
    /// future by a callback on the event loop; when that never runs (the loop was closed first,
    /// or closed with the callback still queued), the guard is dropped undelivered, and then
    /// released in the background: nobody could ever release it, and dropping alone would leave
    /// the lock taken for its lease.
    delivered: std::sync::atomic::AtomicBool,
}

impl NativeGuard {
    pub(crate) fn new(g: Guard) -> Self {
        NativeGuard {
            inner: ProcessLocal::new(Arc::new(g)),
            lost_callbacks: std::sync::Mutex::new(Vec::new()),
            delivered: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// The grant reached its caller (or was handed back with [`Self::abandon`]).
    pub fn mark_delivered(&self) {
        self.delivered.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Take every registered callable out of its slot (to drop them outside the locks). A slot
    /// another thread has locked is left: that thread is emptying it.
    fn take_lost_callbacks(&self) -> Vec<Py<PyAny>> {
        let Some(mut slots) = try_lock(&self.lost_callbacks) else { return Vec::new() };
        std::mem::take(&mut *slots).iter().filter_map(|s| try_lock(s).and_then(|mut cb| cb.take())).collect()
    }

    /// Visit the `on_lost` callables (GC support, for this guard and for a `Held` around one).
    pub(crate) fn visit_callbacks(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Only tried: a slot locked now is being emptied (a reference not visited only keeps
        // its object alive until a later collection).
        if let Some(slots) = try_lock(&self.lost_callbacks) {
            for slot in slots.iter() {
                if let Some(cb) = try_lock(slot) {
                    visit.call(cb.as_ref())?;
                }
            }
        }
        Ok(())
    }

    /// Release in the background a grant whose acquire call was cancelled as it completed.
    /// Whether the client of this guard's lock was closed (false in a forked child, whose
    /// guard is unusable anyway).
    pub fn client_closed(&self, py: Python<'_>) -> bool {
        self.inner.get(py).is_ok_and(|g| g.lock().is_closed())
    }

    pub fn abandon(&self, py: Python<'_>) {
        self.mark_delivered();
        if let Ok(g) = self.inner.get(py) {
            g.clone().release_detached();
        }
    }
}

#[pymethods]
impl NativeGuard {
    /// Release in the background (a grant delivered to a task that was cancelled before it saw
    /// it); never raises.
    #[pyo3(name = "_abandon")]
    fn abandon_py(&self, py: Python<'_>) {
        self.abandon(py);
    }

    /// Release this level (at depth 0 the lock is deleted and waiters are woken).
    pub(crate) fn release(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.inner.get(py)?.clone();
        // A signal that interrupts the caller drops this future: the core finishes the release
        // in the background.
        wait(py, async move { g.release().await })
    }

    /// Awaitable `release`; cancelling the awaitable does not stop the release. It runs as a
    /// task of its own, started here (an abort that came before the release was first polled
    /// used to drop it unstarted, leaving the hold renewed; and a close() before the task first
    /// runs leaves it to be sent); cancelling only stops the wait for it, and the next release
    /// reports its outcome.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        future(py, self.inner.get(py)?.release_spawned(), |py, ()| Ok(py.None()))
    }

    /// Extend the lease to `ttl` from now (owner-checked).
    pub(crate) fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        let ttl = convert::duration(ttl, "ttl")?;
        let g = self.inner.get(py)?.clone();
        wait(py, async move { g.extend(ttl).await })
    }

    /// Awaitable `extend`.
    fn extend_async<'py>(&self, py: Python<'py>, ttl: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let ttl = convert::duration(ttl, "ttl")?;
        let g = self.inner.get(py)?.clone();
        future(py, async move { g.extend(ttl).await }, |py, ()| Ok(py.None()))
    }

    /// The fencing token.
    #[getter]
    pub(crate) fn fence(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.inner.get(py)?.fence())
    }

    /// The reentrancy depth of the owner's hold (0 once lost or released).
    #[getter]
    pub(crate) fn count(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.inner.get(py)?.count())
    }

    /// Seconds left until the local deadline (0 once lost or released).
    pub(crate) fn remaining(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(convert::seconds(self.inner.get(py)?.remaining()))
    }

    /// Raise `LostError` unless still held with more than `margin` of validity left.
    #[pyo3(signature = (margin = None))]
    pub(crate) fn ensure(&self, py: Python<'_>, margin: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let margin = convert::opt_duration(margin, "margin")?.unwrap_or(Duration::ZERO);
        self.inner.get(py)?.ensure(margin).map_err(|e| errors::to_py(py, e))
    }

    /// `"held"`, `"in_doubt"`, `"lost"` or `"released"`.
    #[getter]
    pub(crate) fn state(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.inner.get(py)?.state().name())
    }

    /// Call `callback(error)` once if the hold is lost (from a ferrolock thread; at once if it
    /// already is). An exception in the callback is logged on the `ferrolock` logger.
    pub(crate) fn on_lost(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        if !callback.bind(py).is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err("on_lost needs a callable"));
        }
        let guard = self.inner.get(py)?;
        let slot: LostSlot = Arc::new(std::sync::Mutex::new(Some(callback)));
        if let Some(mut slots) = try_lock(&self.lost_callbacks) {
            // Forget registrations that already ran or were dropped by the core (a level
            // re-registering in a loop must not pile them up).
            slots.retain(|s| try_lock(s).is_none_or(|cb| cb.is_some()));
            slots.push(slot.clone());
        }
        let slot = LostSlotRef(slot);
        guard.on_lost(move |err| {
            with_python(|py| {
                // None: the guard was collected (or the GC cleared it) before the loss.
                if let Some(callback) = slot.take() {
                    let exc = errors::to_py(py, err).into_value(py);
                    if let Err(e) = callback.call1(py, (exc,)) {
                        logging::exception(py, "on_lost callback raised", e);
                    }
                }
            });
        });
        Ok(())
    }

    /// GC support: the `on_lost` callables this guard owns.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.visit_callbacks(&visit)
    }

    /// GC support: drop the `on_lost` callables (they will not be called).
    pub(crate) fn __clear__(&self) {
        drop(self.take_lost_callbacks());
    }
}

impl Drop for NativeGuard {
    /// A guard that is gone takes its `on_lost` callables with it: the core may keep its
    /// closures until the hold ends, but they no longer call anything.
    fn drop(&mut self) {
        drop(self.take_lost_callbacks());
        if !self.delivered.load(std::sync::atomic::Ordering::Acquire)
            && let Some(g) = self.inner.here()
        {
            g.clone().release_detached();
        }
    }
}
