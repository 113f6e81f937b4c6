//! `ferrolock._ferrolock`: the native half of the Python package `ferrolock`.
//!
//! A thin translation layer over the core crate: argument conversion, error mapping, and the
//! plumbing that lets Python wait on the core (GIL released for sync calls, asyncio futures for
//! async ones), and the sync lock's hot path (`held.rs`: the methods of `Lock`, its per-thread
//! owners and `Held`). The rest of the Pythonic API (`Lock`'s Python face, the asyncio owners
//! per task, the decorator) is `python/ferrolock/`.

mod convert;
mod errors;
mod held;
mod logging;
mod native;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _ferrolock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    errors::register(m)?;
    m.add_class::<native::NativeClient>()?;
    m.add_class::<native::NativeLock>()?;
    m.add_class::<native::NativeGuard>()?;
    m.add_class::<native::NativeLockInfo>()?;
    m.add_class::<held::NativeLockBase>()?;
    m.add_class::<held::Held>()?;
    m.add_function(wrap_pyfunction!(native::connect, m)?)?;
    m.add_function(wrap_pyfunction!(native::connect_async, m)?)?;
    m.add_function(wrap_pyfunction!(native::connect_redlock, m)?)?;
    m.add_function(wrap_pyfunction!(native::connect_redlock_async, m)?)?;
    m.add("PROTOCOL_VERSION", ferrolock::PROTOCOL_VERSION)?;
    m.add("MAX_DURATION", ferrolock::MAX_DURATION.as_secs_f64())?;

    let at_exit = wrap_pyfunction!(runtime::at_exit, m)?;
    py.import("atexit")?.call_method1("register", (at_exit,))?;
    let after_fork = wrap_pyfunction!(runtime::after_fork_in_child, m)?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("after_in_child", after_fork)?;
    py.import("os")?.call_method("register_at_fork", (), Some(&kwargs))?;
    logging::install();
    Ok(())
}
