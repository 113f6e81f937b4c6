//! The sync lock in native code: `NativeLockBase` (the methods of `ferrolock.Lock`, which
//! subclasses it), one thread's owner (its core handle with its stack of holds) and
//! `ferrolock.Held` (one level of hold), so that `lock.acquire()`, `with lock:` and
//! `held.release()` run without a Python frame (bench/FINDINGS.md, "2026-11-28: a native sync
//! Held" and "2026-11-28, later: a native Lock").
//!
//! Which thread owns a hold is decided by the `Lock`'s `threading.local`: each thread's owner is
//! kept there as `owner`, made on the thread's first use; the owning thread finds it (under it,
//! `local.owner is owner`), any other thread does not. Not the thread's ident, which the OS
//! hands to a new thread once one has ended. Once the owner is gone (its `Lock` was dropped), a
//! `Held` still kept falls back to the acquiring thread's Rust `ThreadId`, which is never reused.
//!
//! References go one way: `Lock` → `threading.local` → each thread's owner → its stack of
//! `Held`s; a `Held` refers back to its owner and the local only weakly. So a thread that ends
//! (its entry in the local goes) or a `Lock` that is dropped frees the owner at once, and with
//! it the levels nobody else refers to: they stop renewing then, not when the cycle collector
//! next runs. The Python objects these classes keep (the client, name, durations, the
//! `threading.local`, the stack's `Held`s, the `on_lost` callables) are still visible to the
//! garbage collector (`__traverse__`/`__clear__`), for cycles through user objects (an
//! `on_lost` callable that refers to its hold).

use std::sync::Mutex;

use ferrolock::ErrorKind;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pyclass::{PyTraverseError, PyVisit};
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType, PyWeakrefMethods, PyWeakrefReference};

use crate::native::{NativeClient, NativeGuard};
use crate::runtime::{Abandon, ProcessLocal, wait};
use crate::{convert, errors};

/// One thread's core handle on a named lock (its own owner token) and its stack of holds,
/// innermost last. Kept in the `Lock`'s `threading.local` as `owner`; made by
/// `NativeLockBase` only.
#[pyclass(frozen, weakref, module = "ferrolock._ferrolock")]
pub struct NativeOwner {
    lock: ProcessLocal<ferrolock::Lock>,
    /// The lock's name, as given (`Held.name`).
    name: Py<PyAny>,
    /// The lock's default `wait` (any duration or `None`), converted on each acquire, as given.
    wait: Py<PyAny>,
    /// The `Lock`'s `threading.local`, weakly: each `Held` keeps it (so that its thread can
    /// still release it once the `Lock` is gone), the owner does not (the local holds the owner).
    local: Py<PyWeakrefReference>,
    /// The live levels, innermost last. Locked only with the GIL held, never across a call into
    /// Python or a drop of a `Held` (whose destructor may run Python code).
    stack: Mutex<Vec<Py<Held>>>,
}

impl std::fmt::Debug for NativeOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeOwner").field("lock", &self.lock).finish_non_exhaustive()
    }
}

fn lock_stack(m: &Mutex<Vec<Py<Held>>>) -> std::sync::MutexGuard<'_, Vec<Py<Held>>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl NativeOwner {
    /// A new level on top of the stack: its `Held`.
    fn push(slf: &Bound<'_, Self>, g: ferrolock::Guard) -> PyResult<Py<Held>> {
        let py = slf.py();
        let this = slf.get();
        if this.local.bind(py).upgrade().is_none() {
            g.abandon(); // nobody could ever release it
            return Err(errors::new(py, ErrorKind::NotHeld, "the lock's per-thread storage is gone"));
        }
        let held = Py::new(
            py,
            Held {
                guard: NativeGuard::new(g),
                owner: PyWeakrefReference::new(slf)?.unbind(),
                local: this.local.clone_ref(py),
                name: this.name.clone_ref(py),
                thread: std::thread::current().id(),
            },
        )?;
        lock_stack(&this.stack).push(held.clone_ref(py));
        Ok(held)
    }

    /// Take `held` off the stack (the innermost level, usually).
    fn forget(&self, held: &Bound<'_, Held>) {
        let removed = {
            let mut stack = lock_stack(&self.stack);
            match stack.iter().rposition(|h| h.as_ptr() == held.as_ptr()) {
                Some(i) if i + 1 == stack.len() => stack.pop(),
                Some(i) => Some(stack.remove(i)),
                None => None,
            }
        };
        drop(removed); // outside the lock: the last reference runs the `Held`'s destructor
    }
}

impl NativeOwner {
    /// A thread's owner: `lock` (the thread's own core handle), the `Lock`'s `threading.local`
    /// (which must keep it as `owner`), the name as given and the default `wait`.
    fn new(
        lock: ferrolock::Lock,
        local: &Bound<'_, PyAny>,
        name: Py<PyAny>,
        wait: Py<PyAny>,
    ) -> PyResult<Self> {
        Ok(NativeOwner {
            lock: ProcessLocal::new(lock),
            name,
            wait,
            local: PyWeakrefReference::new(local)?.unbind(),
            stack: Mutex::new(Vec::new()),
        })
    }

    /// Acquire (or re-enter), waiting at most `wait` (None: the lock's default); the new level.
    fn acquire(slf: &Bound<'_, Self>, wait: Option<&Bound<'_, PyAny>>) -> PyResult<Py<Held>> {
        let py = slf.py();
        let this = slf.get();
        let w = convert::opt_duration(Some(wait.unwrap_or_else(|| this.wait.bind(py))), "wait")?;
        let l = this.lock.get(py)?.clone();
        let g = crate::runtime::wait(py, async move { l.acquire(w).await })?;
        Self::push(slf, g)
    }

    /// One attempt: the new level, or `None` when another owner holds the lock.
    fn try_acquire(slf: &Bound<'_, Self>) -> PyResult<Option<Py<Held>>> {
        let py = slf.py();
        let l = slf.get().lock.get(py)?.clone();
        match wait(py, async move { l.try_acquire().await })? {
            Some(g) => Self::push(slf, g).map(Some),
            None => Ok(None),
        }
    }

    /// The innermost live level, or `None`.
    fn innermost(&self, py: Python<'_>) -> Option<Py<Held>> {
        lock_stack(&self.stack).last().map(|h| h.clone_ref(py))
    }
}

#[pymethods]
impl NativeOwner {
    /// GC support: the name, the default wait, the weak reference and the stack's levels.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.name)?;
        visit.call(&self.wait)?;
        visit.call(&self.local)?;
        // Only tried (the collector must not block); with the GIL held nobody else has it.
        if let Ok(stack) = self.stack.try_lock() {
            for h in stack.iter() {
                visit.call(h)?;
            }
        }
        Ok(())
    }

    /// GC support: let go of the stack's levels (they stop renewing once collected).
    fn __clear__(&self) {
        let taken = match self.stack.try_lock() {
            Ok(mut stack) => std::mem::take(&mut *stack),
            Err(_) => Vec::new(),
        };
        drop(taken);
    }
}

/// One level of a sync hold, returned by ``Lock.acquire`` and ``with lock as held``.
///
/// It refers to its owner and the `Lock`'s `threading.local` weakly: the owner's stack keeps
/// the hold, and the local keeps the owner, so a strong reference back would make a cycle, and
/// the hold of a thread that ended holding (or of a dropped `Lock`) would go on renewing until
/// Python's cycle collector ran. As it is, the thread's end (or the `Lock`'s) drops the owner
/// and with it every level nobody else refers to.
#[pyclass(frozen, weakref, module = "ferrolock")]
pub struct Held {
    guard: NativeGuard,
    /// The owner whose stack has this level (`NativeOwner`), weakly.
    owner: Py<PyWeakrefReference>,
    /// The `Lock`'s `threading.local`, weakly: the owning thread finds `owner` there.
    local: Py<PyWeakrefReference>,
    /// The lock's name, as given.
    name: Py<PyAny>,
    /// The thread that acquired it: who may release it once its owner is gone (its `Lock` was
    /// dropped). Rust's thread ids are never reused, unlike the OS's.
    thread: std::thread::ThreadId,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("guard", &self.guard).finish_non_exhaustive()
    }
}

#[pymethods]
impl Held {
    /// The lock's name, as given.
    #[getter]
    fn name(&self, py: Python<'_>) -> Py<PyAny> {
        self.name.clone_ref(py)
    }

    /// The fencing token: strictly increasing across grants; re-entry keeps it.
    /// Pass it to the resource you write, which must reject lower tokens.
    #[getter]
    fn fence(&self, py: Python<'_>) -> PyResult<u64> {
        self.guard.fence(py)
    }

    /// The owner's reentrancy depth (0 once lost or released).
    #[getter]
    fn count(&self, py: Python<'_>) -> PyResult<u32> {
        self.guard.count(py)
    }

    /// Seconds left until the local deadline (0 once lost or released).
    fn remaining(&self, py: Python<'_>) -> PyResult<f64> {
        self.guard.remaining(py)
    }

    /// Raise ``LostError`` unless still held with more than ``margin`` of validity left
    /// (``NotHeldError`` if released).
    #[pyo3(signature = (margin = None))]
    fn ensure(&self, py: Python<'_>, margin: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.guard.ensure(py, margin)
    }

    /// ``"held"``, ``"in_doubt"`` (a renewal failed; still valid), ``"lost"`` or
    /// ``"released"``.
    #[getter]
    fn state(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.guard.state(py)
    }

    /// Whether the hold is lost (its lease ran out, or another owner took the lock).
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.guard.state(py)? == "lost")
    }

    /// Call ``callback(error)`` once if the hold is lost, from a ferrolock thread (at once if
    /// it already is). Exceptions it raises are logged on the ``ferrolock`` logger.
    fn on_lost(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        self.guard.on_lost(py, callback)
    }

    /// Release this level (the lock is freed when the outermost level is released).
    ///
    /// Raises ``NotHeldError`` from another thread while the acquiring thread lives, or when
    /// already released, ``LostError`` if
    /// the hold was lost meanwhile (nothing of another owner is deleted).
    fn release(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let owner = this.owner.bind(py).upgrade_as::<NativeOwner>()?;
        let mine = match (&owner, this.local.bind(py).upgrade()) {
            (Some(owner), Some(local)) => local.getattr(intern!(py, "owner")).is_ok_and(|o| o.is(owner)),
            // The owner is gone while its `Lock` lives: the thread that acquired has ended (its
            // entry in the local went with it). Nobody can release in its name any more, so
            // whoever kept the `Held` (a worker thread's return value) may; before, nobody
            // could, and the hold was renewed for as long as the object was kept.
            (None, Some(_)) => true,
            // The `Lock` was dropped: the acquiring thread may still release the level it kept.
            _ => std::thread::current().id() == this.thread,
        };
        if !mine {
            return Err(errors::new(
                py,
                ErrorKind::NotHeld,
                "this hold belongs to another thread; release it from that thread",
            ));
        }
        let result = this.guard.release(py);
        // A transient failure (connection, server timeout) leaves the level in place: retry
        // release. Anything else, KeyboardInterrupt included (the release runs on to its end),
        // takes it off the stack.
        if !matches!(&result, Err(e) if errors::is_transient(py, e))
            && let Some(owner) = owner
        {
            owner.get().forget(slf);
        }
        result
    }

    /// Extend the lease to ``ttl`` from now (raises ``LostError`` if it is already lost).
    fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        self.guard.extend(py, ttl)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(slf: &Bound<'_, Self>, _exc_info: &Bound<'_, PyTuple>) -> PyResult<()> {
        Self::release(slf)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let name = self.name.bind(py).repr()?;
        Ok(match (self.guard.fence(py), self.guard.state(py)) {
            (Ok(fence), Ok(state)) => format!("<Held name={name} fence={fence} state={state}>"),
            // e.g. inherited across fork(): the hold is the parent's
            _ => format!("<Held name={name} (unusable here)>"),
        })
    }

    /// GC support: the `on_lost` callables, the name and the two weak references.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.guard.visit_callbacks(&visit)?;
        visit.call(&self.owner)?;
        visit.call(&self.local)?;
        visit.call(&self.name)
    }

    /// GC support: drop the `on_lost` callables (they will not be called).
    fn __clear__(&self) {
        self.guard.__clear__();
    }
}

/// What `Lock.__init__` was given, and the `Lock`'s `threading.local` (strongly: each thread's
/// owner lives in it).
struct LockState {
    client: Py<NativeClient>,
    /// As given (`Lock.name`, `Held.name`).
    name: Py<PyAny>,
    /// As given (any duration or `None`), converted for each new thread's core handle.
    ttl: Py<PyAny>,
    /// As given (any duration or `None`), converted on each acquire.
    wait: Py<PyAny>,
    renew: Option<bool>,
    fair: bool,
    local: Py<PyAny>,
}

/// `threading.local`, looked up once.
static THREAD_LOCAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The native half of ``ferrolock.Lock`` (which subclasses it): each thread's owner found in a
/// ``threading.local`` and acquire, release and ``with`` in one native call each.
#[pyclass(subclass, module = "ferrolock._ferrolock")]
pub struct NativeLockBase {
    /// `None` until `__init__` ran, and again once the collector cleared it.
    state: Option<LockState>,
}

impl std::fmt::Debug for NativeLockBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeLockBase").field("initialised", &self.state.is_some()).finish()
    }
}

impl NativeLockBase {
    fn state(&self) -> PyResult<&LockState> {
        self.state.as_ref().ok_or_else(|| {
            pyo3::exceptions::PyTypeError::new_err("this Lock is not initialised (Lock.__init__ did not run)")
        })
    }

    /// The calling thread's owner, if it has one yet.
    fn current<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, NativeOwner>>> {
        let py = slf.py();
        let this = slf.try_borrow()?;
        let local = this.state()?.local.bind(py);
        match local.getattr_opt(intern!(py, "owner"))? {
            Some(o) => Ok(Some(o.cast_into::<NativeOwner>()?)),
            None => Ok(None),
        }
    }

    /// The calling thread's owner, made (with a core handle of its own) on its first use.
    fn owner<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, NativeOwner>> {
        let py = slf.py();
        let this = slf.try_borrow()?;
        let state = this.state()?;
        let local = state.local.bind(py);
        if let Some(o) = local.getattr_opt(intern!(py, "owner"))? {
            return Ok(o.cast_into::<NativeOwner>()?);
        }
        let owner = Self::new_owner(py, state)?;
        local.setattr(intern!(py, "owner"), &owner)?;
        Ok(owner)
    }

    /// A new owner for the calling thread (not yet in the local). Validates the name and `ttl`
    /// and fails with `ClosedError` once the client is closed or in a forked child.
    fn new_owner<'py>(py: Python<'py>, state: &LockState) -> PyResult<Bound<'py, NativeOwner>> {
        let lock = state.client.get().core_lock(
            py,
            state.name.bind(py),
            Some(state.ttl.bind(py)),
            state.renew,
            state.fair,
        )?;
        let owner =
            NativeOwner::new(lock, state.local.bind(py), state.name.clone_ref(py), state.wait.clone_ref(py))?;
        Bound::new(py, owner)
    }
}

#[pymethods]
impl NativeLockBase {
    /// An uninitialised lock: ``__init__`` sets it up, so that subclasses may take other
    /// arguments, as with any Python class.
    #[new]
    #[pyo3(
        signature = (*_args, **_kwargs),
        text_signature = "(native, name, *, ttl=None, wait=None, renew=None, fair=False)"
    )]
    fn py_new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        NativeLockBase { state: None }
    }

    /// ``native``: the client's native handle; the rest as ``Client.lock`` takes them.
    /// Validates the name and ``ttl`` now (no I/O); this thread's owner is made here.
    #[pyo3(signature = (native, name, *, ttl = None, wait = None, renew = None, fair = false))]
    fn __init__(
        slf: &Bound<'_, Self>,
        native: Py<NativeClient>,
        name: Py<PyAny>,
        ttl: Option<Py<PyAny>>,
        wait: Option<Py<PyAny>>,
        renew: Option<bool>,
        fair: bool,
    ) -> PyResult<()> {
        let py = slf.py();
        // The default wait is converted at each acquire; a bad one fails here already.
        convert::opt_duration(wait.as_ref().map(|w| w.bind(py)), "wait")?;
        let local = THREAD_LOCAL.import(py, "threading", "local")?.call0()?;
        let state = LockState {
            client: native,
            name,
            ttl: ttl.unwrap_or_else(|| py.None()),
            wait: wait.unwrap_or_else(|| py.None()),
            renew,
            fair,
            local: local.clone().unbind(),
        };
        let owner = Self::new_owner(py, &state)?;
        local.setattr(intern!(py, "owner"), &owner)?;
        // Called again, it starts afresh (as the Python class did); the old state is dropped
        // after the borrow ends, since dropping it may run Python code.
        let old = slf.try_borrow_mut()?.state.replace(state);
        drop(old);
        Ok(())
    }

    /// The lock's name, as given.
    #[getter]
    fn name(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.state()?.name.clone_ref(py))
    }

    /// Acquire (or re-enter), waiting at most ``wait`` seconds (``None``: the lock's
    /// ``wait``, which is unbounded unless given to ``Client.lock``; ``0``: one attempt).
    /// Raises ``AcquireTimeoutError`` (a ``TimeoutError``) when the wait elapses. Other
    /// threads keep running while this one waits.
    #[pyo3(signature = (wait = None))]
    fn acquire(slf: &Bound<'_, Self>, wait: Option<&Bound<'_, PyAny>>) -> PyResult<Py<Held>> {
        let owner = Self::owner(slf)?;
        NativeOwner::acquire(&owner, wait)
    }

    /// One attempt: a ``Held``, or ``None`` when another owner holds the lock.
    fn try_acquire(slf: &Bound<'_, Self>) -> PyResult<Option<Py<Held>>> {
        let owner = Self::owner(slf)?;
        NativeOwner::try_acquire(&owner)
    }

    /// Release this thread's innermost hold. ``NotHeldError`` if this thread holds none.
    fn release(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let Some(held) = Self::held(slf)? else {
            return Err(errors::new(py, ErrorKind::NotHeld, "this thread does not hold the lock"));
        };
        Held::release(held.bind(py))
    }

    /// This thread's innermost hold, or ``None``.
    #[getter]
    fn held(slf: &Bound<'_, Self>) -> PyResult<Option<Py<Held>>> {
        Ok(Self::current(slf)?.and_then(|o| o.get().innermost(slf.py())))
    }

    fn __enter__(slf: &Bound<'_, Self>) -> PyResult<Py<Held>> {
        NativeOwner::acquire(&Self::owner(slf)?, None)
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(slf: &Bound<'_, Self>, _exc_info: &Bound<'_, PyTuple>) -> PyResult<()> {
        Self::release(slf)
    }

    /// GC support: the client, name, durations and the `threading.local` (each thread's owner,
    /// and through it the holds, are reached through the local).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(s) = &self.state {
            visit.call(&s.client)?;
            visit.call(&s.name)?;
            visit.call(&s.ttl)?;
            visit.call(&s.wait)?;
            visit.call(&s.local)?;
        }
        Ok(())
    }

    /// GC support: let go of all of it (every later call raises `TypeError`).
    fn __clear__(&mut self) {
        self.state = None;
    }
}
