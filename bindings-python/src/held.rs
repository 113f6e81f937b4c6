//! The sync owners and `ferrolock.Held`: one thread's core handle with its stack of holds, and
//! one level of hold, in native code so that `Lock.acquire` and `Held.release` are one native
//! call each (bench/FINDINGS.md, "2026-11-28: a native sync Held").
//!
//! Which thread owns a hold is decided as before by the `Lock`'s `threading.local`: the owning
//! thread finds this owner there (under it, `local.owner is owner`), any other thread does not.
//! Not the thread's ident, which the OS hands to a new thread once one has ended.
//!
//! The Python objects these classes keep (the name, the `threading.local`, the stack's `Held`s,
//! the `on_lost` callables) are visible to the garbage collector (`__traverse__`/`__clear__`):
//! an owner and its holds refer to each other, and a thread that ends or a `Lock` that is
//! dropped with holds still on the stack leaves a cycle for it to collect, as the pure-Python
//! classes did.

use std::sync::Mutex;

use ferrolock::ErrorKind;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::pyclass::{PyTraverseError, PyVisit};
use pyo3::types::{PyTuple, PyWeakrefMethods, PyWeakrefReference};

use crate::native::{NativeGuard, NativeLock};
use crate::runtime::{Abandon, ProcessLocal, wait};
use crate::{convert, errors};

/// One thread's core handle on a named lock (its own owner token) and its stack of holds,
/// innermost last. Kept in the `Lock`'s `threading.local` as `owner`.
#[pyclass(frozen, module = "ferrolock._ferrolock")]
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
        let Some(local) = this.local.bind(py).upgrade() else {
            g.abandon(); // nobody could ever release it
            return Err(errors::new(py, ErrorKind::NotHeld, "the lock's per-thread storage is gone"));
        };
        let held = Py::new(
            py,
            Held { guard: NativeGuard::new(g), owner: slf.clone().unbind(), local: local.unbind() },
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

#[pymethods]
impl NativeOwner {
    /// A thread's owner: `lock` (the thread's own handle, from `NativeClient.lock`), the
    /// `Lock`'s `threading.local` (which must keep it as `owner`), the name as given and the
    /// default `wait`.
    #[new]
    #[pyo3(signature = (lock, local, name, wait = None))]
    fn new(
        py: Python<'_>,
        lock: PyRef<'_, NativeLock>,
        local: &Bound<'_, PyAny>,
        name: Py<PyAny>,
        wait: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        Ok(NativeOwner {
            lock: ProcessLocal::new(lock.core(py)?.clone()),
            name,
            wait: wait.unwrap_or_else(|| py.None()),
            local: PyWeakrefReference::new(local)?.unbind(),
            stack: Mutex::new(Vec::new()),
        })
    }

    /// Acquire (or re-enter), waiting at most `wait` (None: the lock's default); the new level.
    #[pyo3(signature = (wait = None))]
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
    #[getter]
    fn innermost(&self, py: Python<'_>) -> Option<Py<Held>> {
        lock_stack(&self.stack).last().map(|h| h.clone_ref(py))
    }

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
#[pyclass(frozen, module = "ferrolock")]
pub struct Held {
    guard: NativeGuard,
    owner: Py<NativeOwner>,
    /// The `Lock`'s `threading.local`: the owning thread finds `owner` there.
    local: Py<PyAny>,
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
        self.owner.get().name.clone_ref(py)
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
    /// Raises ``NotHeldError`` from another thread or when already released, ``LostError`` if
    /// the hold was lost meanwhile (nothing of another owner is deleted).
    fn release(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let owner = this.owner.bind(py);
        let mine = this.local.bind(py).getattr(intern!(py, "owner")).is_ok_and(|o| o.is(owner));
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
        if !matches!(&result, Err(e) if errors::is_transient(py, e)) {
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
        let name = self.owner.get().name.bind(py).repr()?;
        Ok(match (self.guard.fence(py), self.guard.state(py)) {
            (Ok(fence), Ok(state)) => format!("<Held name={name} fence={fence} state={state}>"),
            // e.g. inherited across fork(): the hold is the parent's
            _ => format!("<Held name={name} (unusable here)>"),
        })
    }

    /// GC support: the `on_lost` callables, the owner and the `threading.local`.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.guard.visit_callbacks(&visit)?;
        visit.call(&self.owner)?;
        visit.call(&self.local)
    }

    /// GC support: drop the `on_lost` callables (they will not be called).
    fn __clear__(&self) {
        self.guard.__clear__();
    }
}
