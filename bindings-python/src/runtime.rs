//! The binding's tokio runtime and the two ways Python waits on it.
//!
//! * Sync calls drive the runtime from the calling thread with the GIL released (see
//!   [`ProcessRuntime`]), taking the GIL back every 50 ms only to let the main thread see
//!   signals (Ctrl-C drops the core future: a cancellation the core cleans up after).
//! * Async calls return an `asyncio.Future` completed from a blocking-pool thread through
//!   `loop.call_soon_threadsafe`; cancelling it aborts the core future.
//!
//! Nothing that can wait for the GIL runs on a thread that drives the runtime.
//!
//! One runtime per process: after `fork()` the child builds its own (the parent's worker
//! threads do not exist there) and never drops the inherited one.
//!
//! Interpreter exit (TOOLCHAIN.md pitfall 1): every attach to the interpreter from a runtime
//! thread goes through [`with_python`], which counts itself in-flight and refuses once the
//! `atexit` hook ([`at_exit`]) has started; the hook waits (GIL released, at most 2 s) for the
//! in-flight count to reach zero, so no runtime thread touches Python while it finalizes.

use std::cell::Cell;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use ferrolock::driver::Driver;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;

use crate::errors;

/// Sync calls run on the caller's thread for this long at most before the GIL is taken back to
/// look for signals (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

thread_local! {
    /// This thread's signal-check timer for [`wait`]: one timer kept across calls, moved
    /// [`SIGNAL_CHECK`] on each time it fires, so that a wait returns to Python at least that
    /// often. A timer armed and cleared on every call cost 1,450 instructions per acquire +
    /// release pair, 4 % of the Python W1 loop (bench/FINDINGS.md, "one signal-check timer"). It
    /// belongs to this process's runtime: a forked child leaks the parent's and makes its own.
    static SIGNAL_TICKER: Cell<Option<ProcessLocal<Pin<Box<tokio::time::Sleep>>>>> =
        const { Cell::new(None) };
}

/// This process's runtime: a [`Driver`] (a current-thread runtime driven by the threads that
/// wait on it), and the process it belongs to.
///
/// A sync call drives the runtime from the calling thread itself (GIL released): the
/// connection's driver task runs right there, so a call costs one wait per round trip, like the
/// async core, instead of a hop to a worker thread and one back. Between calls the driver's
/// background thread drives it (watchdog renewals, release notifications, asyncio calls spawned
/// with [`Driver::spawn`]).
pub struct ProcessRuntime {
    pid: u32,
    driver: &'static Driver,
}

impl std::ops::Deref for ProcessRuntime {
    type Target = Driver;
    fn deref(&self) -> &Driver {
        self.driver
    }
}

static RUNTIME: AtomicPtr<ProcessRuntime> = AtomicPtr::new(std::ptr::null_mut());

/// This process's id (cached by the core, right in a forked child): every call checks it, since
/// the runtime and each object belong to the process that made them.
pub fn pid() -> u32 {
    ferrolock::driver::process_id()
}

/// This process's runtime, built on first use (and again in a forked child).
pub fn runtime(py: Python<'_>) -> PyResult<&'static ProcessRuntime> {
    let pid = pid();
    let cur = RUNTIME.load(Ordering::Acquire);
    // SAFETY: pointers stored in RUNTIME come from Box::leak and are never freed.
    if let Some(p) = unsafe { cur.as_ref() }
        && p.pid == pid
    {
        return Ok(p);
    }
    let driver = Driver::start("ferrolock-py")
        .map_err(|e| errors::internal(py, &format!("cannot start the tokio runtime: {e}")))?;
    let new: &'static mut ProcessRuntime = Box::leak(Box::new(ProcessRuntime { pid, driver }));
    let new_ptr: *mut ProcessRuntime = new;
    match RUNTIME.compare_exchange(cur, new_ptr, Ordering::AcqRel, Ordering::Acquire) {
        // The inherited runtime (if any) is leaked on purpose: its threads are the parent's.
        Ok(_) => Ok(new),
        Err(other) => {
            // Another thread won the race: use its runtime; ours is leaked unused (rare, bounded).
            // SAFETY: as above.
            match unsafe { other.as_ref() } {
                Some(p) if p.pid == pid => Ok(p),
                _ => Err(errors::internal(py, "the tokio runtime changed while starting")),
            }
        }
    }
}

/// A value that belongs to the process that made it: dropped normally there, leaked in a
/// forked child (its destructor could wait on a lock held by a parent thread that does not
/// exist in the child, or talk to the parent's connections).
pub struct ProcessLocal<T> {
    pid: u32,
    value: ManuallyDrop<T>,
}

impl<T> ProcessLocal<T> {
    pub fn new(value: T) -> Self {
        ProcessLocal { pid: pid(), value: ManuallyDrop::new(value) }
    }

    /// The value, unless this is a forked child.
    pub fn here(&self) -> Option<&T> {
        (self.pid == pid()).then_some(&*self.value)
    }

    /// The value itself, unless this is a forked child (which leaks it, as a drop would).
    pub fn into_here(self) -> Option<T> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; its value is taken exactly once.
        (this.pid == pid()).then(|| unsafe { ManuallyDrop::take(&mut this.value) })
    }

    /// The value, or a `ClosedError` in a forked child.
    pub fn get(&self, py: Python<'_>) -> PyResult<&T> {
        if self.pid == pid() {
            Ok(&self.value)
        } else {
            Err(errors::closed(
                py,
                "this object was created before fork() in the parent process; \
                 the parent keeps its locks: connect a new client in this process",
            ))
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ProcessLocal<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pid == pid() { self.value.fmt(f) } else { f.write_str("<inherited across fork>") }
    }
}

impl<T> Drop for ProcessLocal<T> {
    fn drop(&mut self) {
        if self.pid == pid() {
            // SAFETY: dropped exactly once, here.
            unsafe { ManuallyDrop::drop(&mut self.value) }
        }
    }
}

/// Run `fut` to completion with the GIL released: on this thread, driving the runtime (see
/// [`ProcessRuntime`]), or, from a thread already inside a tokio runtime (an `on_lost`
/// callback's thread, say), spawned and waited for.
pub fn wait<T, F>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = ferrolock::Result<T>> + Send + 'static,
    T: Abandon + Send + 'static,
{
    let prt = runtime(py)?;
    if tokio::runtime::Handle::try_current().is_ok() {
        return wait_spawned(py, prt, fut);
    }
    let mut fut = Box::pin(fut);
    loop {
        let mut ticker = SIGNAL_TICKER.take().and_then(ProcessLocal::into_here);
        let (got, back) = py.detach(move || {
            let got = prt.drive(std::future::poll_fn(|cx| {
                if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                    return Poll::Ready(Some(r));
                }
                let tick = ticker.get_or_insert_with(|| Box::pin(tokio::time::sleep(SIGNAL_CHECK)));
                if tick.as_mut().poll(cx).is_ready() {
                    tick.as_mut().reset(tokio::time::Instant::now() + SIGNAL_CHECK);
                    return Poll::Ready(None);
                }
                Poll::Pending
            }));
            (got, (fut, ticker))
        });
        let ticker;
        (fut, ticker) = back;
        SIGNAL_TICKER.set(ticker.map(ProcessLocal::new));
        match got {
            Some(r) => return r.map_err(|e| errors::to_py(py, e)),
            None => {
                if let Err(e) = py.check_signals() {
                    // Dropping the core future cancels it (the core undoes a half-done acquire,
                    // on the runtime: let the background thread drive that at once).
                    let entered = prt.runtime().enter();
                    drop(fut);
                    drop(entered);
                    prt.kick();
                    return Err(e);
                }
            }
        }
    }
}

/// [`wait`] for a thread that cannot drive the runtime: spawn `fut` and wait on a channel.
fn wait_spawned<T, F>(py: Python<'_>, prt: &'static ProcessRuntime, fut: F) -> PyResult<T>
where
    F: Future<Output = ferrolock::Result<T>> + Send + 'static,
    T: Abandon + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = prt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let mut rx = rx;
    loop {
        let (got, back) = py.detach(move || (rx.recv_timeout(SIGNAL_CHECK), rx));
        rx = back;
        match got {
            Ok(r) => return r.map_err(|e| errors::to_py(py, e)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    // Dropping the core future cancels it (the core undoes a half-done acquire).
                    // If it finished meanwhile, its result arrives anyway: hand a grant back.
                    task.abort();
                    let (late, _) = py.detach(move || (rx.recv_timeout(Duration::from_secs(2)), rx));
                    if let Ok(Ok(value)) = late {
                        value.abandon();
                    }
                    return Err(e);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(errors::internal(py, "a ferrolock task ended without a result"));
            }
        }
    }
}

/// What to do with a result nobody will receive (the caller was interrupted as it arrived).
pub trait Abandon: Sized {
    /// Undo whatever the result holds; by default nothing.
    fn abandon(self) {}
}

impl Abandon for () {}
impl Abandon for ferrolock::Client {}
impl Abandon for Option<ferrolock::LockInfo> {}

impl Abandon for ferrolock::Guard {
    fn abandon(self) {
        std::sync::Arc::new(self).release_detached();
    }
}

impl Abandon for Option<ferrolock::Guard> {
    fn abandon(self) {
        if let Some(g) = self {
            g.abandon();
        }
    }
}

static ASYNCIO_GET_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Run `fut` on the runtime; return an `asyncio.Future` of the running loop that completes
/// with `convert(value)` or the mapped exception.
pub fn future<'py, T, F, C>(py: Python<'py>, fut: F, convert: C) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = ferrolock::Result<T>> + Send + 'static,
    T: Send + 'static,
    C: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    let rt = runtime(py)?;
    let get_loop = ASYNCIO_GET_LOOP.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
    })?;
    let event_loop = get_loop.bind(py).call0()?;
    let py_fut = event_loop.call_method0("create_future")?;
    let (loop_ref, fut_ref) = (event_loop.clone().unbind(), py_fut.clone().unbind());
    let task = rt.spawn(async move {
        let result = fut.await;
        // Enter Python on a blocking-pool thread, never on the runtime's only worker: waiting
        // there for the GIL would stall every connection (and the watchdog) meanwhile.
        drop(tokio::task::spawn_blocking(move || {
            with_python(move |py| {
                let (ok, value) = match result {
                    Ok(v) => match convert(py, v) {
                        Ok(obj) => (true, obj),
                        Err(e) => (false, e.into_value(py).into_any()),
                    },
                    Err(e) => (false, errors::to_py(py, e).into_value(py).into_any()),
                };
                let setter = match complete_fn(py) {
                    Ok(f) => f,
                    Err(e) => return e.write_unraisable(py, None),
                };
                // Fails only if the loop is closed: nobody is waiting any more. A grant is handed
                // back at once (the failed call's traceback may keep the arguments alive for a
                // while; one dropped undelivered later is released too: `NativeGuard::delivered`).
                let grant = ok.then(|| value.clone_ref(py));
                let sent =
                    loop_ref.bind(py).call_method1("call_soon_threadsafe", (setter, fut_ref, ok, value));
                if sent.is_err()
                    && let Some(grant) = grant
                    && let Ok(guard) = grant.bind(py).cast::<crate::native::NativeGuard>()
                {
                    guard.get().abandon(py);
                }
            })
        }));
    });
    let abort = task.abort_handle();
    let on_done = PyCFunction::new_closure(py, None, None, move |args, _kwargs| -> PyResult<()> {
        let f = args.get_item(0)?;
        if f.call_method0("cancelled")?.is_truthy()? {
            abort.abort(); // dropping the core future cancels it (with its cleanup)
        }
        Ok(())
    })?;
    py_fut.call_method1("add_done_callback", (on_done,))?;
    Ok(py_fut)
}

static COMPLETE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn complete_fn(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    COMPLETE
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(pyo3::wrap_pyfunction!(complete_future, py)?.into_any().unbind())
        })
        .map(|f| f.bind(py))
}

/// Set an asyncio future's outcome unless it was cancelled meanwhile (runs on the loop).
#[pyfunction]
fn complete_future(fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if fut.call_method0("done")?.is_truthy()? {
        // Cancelled just as the core finished: a grant nobody will see must not linger.
        if ok && let Ok(guard) = value.cast::<crate::native::NativeGuard>() {
            guard.get().abandon(fut.py());
        }
        return Ok(());
    }
    if ok {
        if let Ok(guard) = value.cast::<crate::native::NativeGuard>() {
            // The client was closed after the grant and before this callback ran (a close in
            // the same turn of the loop): the core's rule for a grant that returns after the
            // close applies, it is released and the caller gets ClosedError.
            if guard.get().client_closed(fut.py()) {
                guard.get().abandon(fut.py());
                let closed = ferrolock::Error::new(ferrolock::ErrorKind::Closed, "the client was closed");
                fut.call_method1("set_exception", (errors::to_py(fut.py(), closed).into_value(fut.py()),))?;
                return Ok(());
            }
            guard.get().mark_delivered();
        }
        fut.call_method1("set_result", (value,))?;
    } else {
        fut.call_method1("set_exception", (value,))?;
    }
    Ok(())
}

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

/// Attach to the interpreter from a runtime (non-Python) thread, unless it is shutting down.
/// Returns `None` when the call was skipped.
pub fn with_python<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let r = if EXITING.load(Ordering::SeqCst) { None } else { Some(Python::attach(f)) };
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    r
}

/// Registered with `os.register_at_fork(after_in_child=...)`: runtime threads that were about
/// to enter Python in the parent do not exist in the child.
#[pyfunction]
pub fn after_fork_in_child() {
    IN_FLIGHT.store(0, Ordering::SeqCst);
}

/// Registered with `atexit`: stop runtime threads from entering Python, and let those already
/// on their way finish (GIL released, at most 2 s) before the interpreter finalizes.
#[pyfunction]
pub fn at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let until = Instant::now() + Duration::from_secs(2);
        while IN_FLIGHT.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
