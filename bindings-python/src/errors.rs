//! Exceptions: `ferrolock.LockError` plus one subclass per core `ErrorKind`, built by walking
//! `ErrorKind::ALL`, so a kind added to the core gets its class without an edit here.
//!
//! Class names are the kind's stable name in CamelCase plus `Error` (`NOT_HELD` →
//! `NotHeldError`), except where that would shadow a builtin (`CONNECTION`, `TIMEOUT`,
//! `PERMISSION` get a `Redis` prefix). Each class has `code` (the stable number) and `name` (the
//! stable string). Builtin second bases where they fit: timeouts are `TimeoutError`, connection
//! failures `ConnectionError`, bad argument values `ValueError`.

use ferrolock::ErrorKind;
use pyo3::exceptions::{PyConnectionError, PyException, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

struct Table {
    base: Py<PyType>,
    kinds: Vec<(ErrorKind, Py<PyType>)>,
}

static TABLE: PyOnceLock<Table> = PyOnceLock::new();

/// The Python class name of a kind.
pub fn class_name(kind: ErrorKind) -> String {
    let camel: String = kind
        .name()
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_uppercase().chain(c.flat_map(|x| x.to_lowercase())).collect::<String>(),
                None => String::new(),
            }
        })
        .collect();
    match kind {
        ErrorKind::Connection | ErrorKind::Timeout | ErrorKind::Permission => format!("Redis{camel}Error"),
        _ => format!("{camel}Error"),
    }
}

fn builtin_base<'py>(py: Python<'py>, kind: ErrorKind) -> Option<Bound<'py, PyType>> {
    match kind {
        ErrorKind::AcquireTimeout | ErrorKind::Timeout => Some(py.get_type::<PyTimeoutError>()),
        ErrorKind::Connection => Some(py.get_type::<PyConnectionError>()),
        ErrorKind::InvalidArgument
        | ErrorKind::InvalidName
        | ErrorKind::InvalidDuration
        | ErrorKind::InvalidUrl
        | ErrorKind::InvalidConfig => Some(py.get_type::<PyValueError>()),
        _ => None,
    }
}

fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Bound<'py, PyTuple>,
    doc: &str,
    kind: Option<ErrorKind>,
) -> PyResult<Py<PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__module__", "ferrolock")?;
    dict.set_item("__doc__", doc)?;
    match kind {
        Some(kind) => {
            dict.set_item("code", kind.code())?;
            dict.set_item("name", kind.name())?;
            dict.set_item("transient", kind.is_transient())?;
        }
        None => {
            // The base class: every raised error is one of the subclasses.
            dict.set_item("code", 0)?;
            dict.set_item("name", "LOCK_ERROR")?;
            dict.set_item("transient", false)?;
        }
    }
    let ty = py.get_type::<PyType>().call1((name, bases, dict))?;
    Ok(ty.cast_into::<PyType>()?.unbind())
}

fn doc_of(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidArgument => "An argument is out of range or malformed.",
        ErrorKind::InvalidName => "A lock name is empty, too long, or not encodable as UTF-8.",
        ErrorKind::InvalidDuration => {
            "A duration is negative, NaN, infinite, too short for the drift allowance, or absurd."
        }
        ErrorKind::InvalidUrl => {
            "A server URL cannot be parsed, uses an unsupported scheme, or asks for what the server \
             refuses (its database number; a Sentinel that is none)."
        }
        ErrorKind::InvalidConfig => "A configuration value is inconsistent.",
        ErrorKind::Closed => "The object cannot be used any more (closed, or inherited across fork()).",
        ErrorKind::NullArgument => "A required pointer was NULL (C API only).",
        ErrorKind::Connection => "The server cannot be reached or the connection dropped.",
        ErrorKind::Timeout => "The server did not answer in time; the command may or may not have run.",
        ErrorKind::Auth => "The server refused the credentials.",
        ErrorKind::Tls => "TLS setup or verification failed.",
        ErrorKind::NotHeld => {
            "The caller does not hold the lock (never acquired, released, or another owner)."
        }
        ErrorKind::Lost => "The lock was held but is lost: its lease ran out or another owner took it.",
        ErrorKind::AcquireTimeout => "The wait elapsed before the lock could be acquired.",
        ErrorKind::QuorumNotReached => "Redlock could not obtain a majority of the masters.",
        ErrorKind::ReentrancyLimit => "Re-entry refused: the reentrancy depth limit is reached.",
        ErrorKind::Cancelled => "The operation was cancelled.",
        ErrorKind::NotReplicated => {
            "Fewer replicas than replica_acks asks for acknowledged a grant in time; it was undone."
        }
        ErrorKind::Protocol => "The server sent a reply ferrolock does not understand.",
        ErrorKind::Script => "A script failed on the server.",
        ErrorKind::Permission => "The server's ACL denied a command or key.",
        ErrorKind::Internal => "A bug in ferrolock.",
        _ => "A ferrolock error (see .name and .code).",
    }
}

fn table(py: Python<'_>) -> PyResult<&Table> {
    TABLE.get_or_try_init(py, || {
        let base = make_class(
            py,
            "LockError",
            PyTuple::new(py, [py.get_type::<PyException>()])?,
            "Base class of every ferrolock error; each subclass has `code` (int), `name` (str) and\n`transient` (bool: a retry later may succeed).",
            None,
        )?;
        let mut kinds = Vec::with_capacity(ErrorKind::ALL.len());
        for &kind in ErrorKind::ALL {
            let mut bases = vec![base.bind(py).clone()];
            bases.extend(builtin_base(py, kind));
            let ty = make_class(
                py,
                &class_name(kind),
                PyTuple::new(py, bases)?,
                doc_of(kind),
                Some(kind),
            )?;
            kinds.push((kind, ty));
        }
        Ok(Table { base, kinds })
    })
}

/// Add `LockError` and every kind's class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let t = table(py)?;
    m.add("LockError", t.base.bind(py))?;
    for (kind, ty) in &t.kinds {
        m.add(class_name(*kind).as_str(), ty.bind(py))?;
    }
    m.add_function(pyo3::wrap_pyfunction!(error_table, m)?)?;
    m.add_function(pyo3::wrap_pyfunction!(make_error, m)?)?;
    Ok(())
}

/// Every core error kind as `(code, name, class)`, in code order (the mapping's proof).
#[pyfunction]
fn error_table(py: Python<'_>) -> PyResult<Vec<(u32, &'static str, Py<PyType>)>> {
    Ok(table(py)?.kinds.iter().map(|(k, ty)| (k.code(), k.name(), ty.clone_ref(py))).collect())
}

/// The exception ferrolock raises for a core error with this code (for tests and tooling).
#[pyfunction]
fn make_error(py: Python<'_>, code: u32, message: &str) -> PyResult<Py<PyAny>> {
    let kind = ErrorKind::from_code(code)
        .ok_or_else(|| PyValueError::new_err(format!("no ferrolock error has code {code}")))?;
    Ok(to_py(py, ferrolock::Error::new(kind, message)).into_value(py).into_any())
}

/// A core error as the matching Python exception; its cause (the failure that ended a wait) as
/// the exception's `__cause__`, as `raise … from cause` sets it.
pub fn to_py(py: Python<'_>, e: ferrolock::Error) -> PyErr {
    match table(py) {
        Ok(t) => {
            let ty = t.kinds.iter().find(|(k, _)| *k == e.kind()).map_or(&t.base, |(_, ty)| ty);
            let err = PyErr::from_type(ty.bind(py).clone(), (e.message().to_owned(),));
            if let Some(cause) = e.cause() {
                err.set_cause(py, Some(to_py(py, cause.clone())));
            }
            err
        }
        Err(err) => err,
    }
}

/// A `ClosedError` with `message`.
pub fn closed(py: Python<'_>, message: &str) -> PyErr {
    to_py(py, ferrolock::Error::new(ErrorKind::Closed, message))
}

/// An `InternalError` with `message`.
pub fn internal(py: Python<'_>, message: &str) -> PyErr {
    to_py(py, ferrolock::Error::new(ErrorKind::Internal, message))
}

/// An error of `kind` with `message`.
pub fn new(py: Python<'_>, kind: ErrorKind, message: &str) -> PyErr {
    to_py(py, ferrolock::Error::new(kind, message))
}

/// Whether `e` is a `LockError` of a transient kind (a retry later may succeed: the connection,
/// a server timeout); anything else, `KeyboardInterrupt` included, is not. Read from the
/// exception's `transient` attribute, as `_locks.py` reads it for the asyncio holds.
pub fn is_transient(py: Python<'_>, e: &PyErr) -> bool {
    let value = e.value(py);
    value.getattr(pyo3::intern!(py, "transient")).and_then(|t| t.is_truthy()).unwrap_or(false)
}
