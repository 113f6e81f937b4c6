//! Python values to core arguments: durations, lock names, client options.

use std::time::Duration;

use ferrolock::{ClientOptions, ErrorKind, MAX_DURATION, ReplicaAcks};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString, PyType};

use crate::errors;

static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn bad(py: Python<'_>, what: &str, why: &str) -> PyErr {
    errors::new(py, ErrorKind::InvalidDuration, &format!("{what}: {why}"))
}

/// Seconds (`int` or `float`) or a `datetime.timedelta`, as a `Duration`. Negative, NaN,
/// infinite and absurdly long values raise `InvalidDurationError`; other types `TypeError`.
pub fn duration(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let py = v.py();
    let too_long = || bad(py, what, "longer than one year");
    if v.is_instance(TIMEDELTA.import(py, "datetime", "timedelta")?)? {
        let days: i64 = v.getattr("days")?.extract()?;
        let secs: i64 = v.getattr("seconds")?.extract()?;
        let micros: i64 = v.getattr("microseconds")?.extract()?;
        let total = i128::from(days) * 86_400_000_000 + i128::from(secs) * 1_000_000 + i128::from(micros);
        if total < 0 {
            return Err(bad(py, what, "must not be negative"));
        }
        let total = u64::try_from(total).map_err(|_| too_long())?;
        let d = Duration::from_micros(total);
        return if d > MAX_DURATION { Err(too_long()) } else { Ok(d) };
    }
    if v.is_instance_of::<PyBool>() || !(v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>()) {
        let ty = v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned());
        return Err(PyTypeError::new_err(format!(
            "{what} must be seconds (int or float) or a datetime.timedelta, not {ty}"
        )));
    }
    let secs: f64 = if v.is_instance_of::<PyInt>() {
        match v.extract::<i64>() {
            Ok(n) => n as f64,
            Err(_) => return Err(if v.lt(0)? { bad(py, what, "must not be negative") } else { too_long() }),
        }
    } else {
        v.extract()?
    };
    if secs.is_nan() {
        return Err(bad(py, what, "must be a number, not NaN"));
    }
    if secs < 0.0 {
        return Err(bad(py, what, "must not be negative"));
    }
    if secs.is_infinite() {
        return Err(bad(py, what, "must be finite"));
    }
    if secs > MAX_DURATION.as_secs_f64() {
        return Err(too_long());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| too_long())
}

/// `None` or a duration.
/// A duration as float seconds, from whole nanoseconds: `as_secs_f64` adds the fraction to the
/// whole seconds in floats, which reads a lease of 1.118 s back as 1.1179999999999999.
pub fn seconds(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e9
}

pub fn opt_duration(v: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => duration(v, what).map(Some),
    }
}

/// A lock name: `str` (UTF-8) or `bytes`. Emptiness and length are checked by the core.
pub fn name(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let py = v.py();
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = v.cast::<PyString>() {
        return match s.extract::<String>() {
            Ok(s) => Ok(s.into_bytes()),
            Err(_) => Err(errors::new(
                py,
                ErrorKind::InvalidName,
                "the lock name is not valid UTF-8 (lone surrogate?); pass bytes for binary names",
            )),
        };
    }
    Err(PyTypeError::new_err("a lock name must be str or bytes"))
}

/// Client options from keyword arguments; an unknown key is a `TypeError`, as for any call.
pub fn client_options(opts: Option<&Bound<'_, PyDict>>) -> PyResult<ClientOptions> {
    let mut o = ClientOptions::default();
    let Some(opts) = opts else { return Ok(o) };
    let py = opts.py();
    let (mut tls_ca, mut tls_cert, mut tls_key) = (None, None, None);
    let path = |v: &Bound<'_, PyAny>, what: &str| -> PyResult<Option<std::path::PathBuf>> {
        if v.is_none() {
            return Ok(None);
        }
        v.extract()
            .map(Some)
            .map_err(|_| PyTypeError::new_err(format!("{what} must be a str or os.PathLike")))
    };
    for (k, v) in opts.iter() {
        let key: String = k.extract()?;
        let int = |what: &str| -> PyResult<u64> {
            if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
                return Err(PyTypeError::new_err(format!("{what} must be an int")));
            }
            v.extract::<u64>().map_err(|_| {
                errors::new(
                    py,
                    ErrorKind::InvalidConfig,
                    &format!("{what} must be a non-negative int that fits 64 bits"),
                )
            })
        };
        match key.as_str() {
            "connect_timeout" => o.connect_timeout = duration(&v, &key)?,
            "response_timeout" => o.response_timeout = duration(&v, &key)?,
            "drift_min" => o.drift_min = duration(&v, &key)?,
            "watchdog_ttl" => o.watchdog_ttl = duration(&v, &key)?,
            "fence_retention" => o.fence_retention = duration(&v, &key)?,
            "subscription_linger" => o.subscription_linger = duration(&v, &key)?,
            "redlock_node_timeout" => o.redlock_node_timeout = duration(&v, &key)?,
            "redlock_retry_jitter" => o.redlock_retry_jitter = duration(&v, &key)?,
            "redlock_quorum" => {
                o.redlock_quorum = if v.is_none() {
                    None
                } else {
                    Some(usize::try_from(int(&key)?).map_err(|_| {
                        errors::new(py, ErrorKind::InvalidConfig, "redlock_quorum is too large")
                    })?)
                };
            }
            "redlock_max_inflight" => {
                o.redlock_max_inflight = usize::try_from(int(&key)?).map_err(|_| {
                    errors::new(py, ErrorKind::InvalidConfig, "redlock_max_inflight is too large")
                })?;
            }
            "prefix" => {
                o.prefix = v.extract().map_err(|_| PyTypeError::new_err("prefix must be a str"))?;
            }
            "max_name_len" => {
                o.max_name_len = usize::try_from(int(&key)?)
                    .map_err(|_| errors::new(py, ErrorKind::InvalidConfig, "max_name_len is too large"))?;
            }
            "max_reentrancy" => {
                o.max_reentrancy = u32::try_from(int(&key)?)
                    .map_err(|_| errors::new(py, ErrorKind::InvalidConfig, "max_reentrancy is too large"))?;
            }
            "drift_factor" => {
                if v.is_instance_of::<PyBool>() {
                    return Err(PyTypeError::new_err("drift_factor must be a float"));
                }
                o.drift_factor =
                    v.extract().map_err(|_| PyTypeError::new_err("drift_factor must be a float"))?;
            }
            "replica_acks" => o.replica_acks = replica_acks(&v)?,
            "tls_ca_file" => tls_ca = path(&v, &key)?,
            "tls_cert_file" => tls_cert = path(&v, &key)?,
            "tls_key_file" => tls_key = path(&v, &key)?,
            other => return Err(PyTypeError::new_err(format!("unexpected client option {other:?}"))),
        }
    }
    let core = |e: ferrolock::Error| errors::to_py(py, e);
    if let Some(ca) = tls_ca {
        o.tls = o.tls.with_root_ca_file(ca).map_err(core)?;
    }
    match (tls_cert, tls_key) {
        (None, None) => {}
        (Some(cert), Some(key)) => o.tls = o.tls.with_client_cert_files(cert, key).map_err(core)?,
        _ => {
            return Err(errors::new(
                py,
                ErrorKind::InvalidConfig,
                "tls_cert_file and tls_key_file go together",
            ));
        }
    }
    Ok(o)
}

/// `replica_acks`: `None`, or `(replicas, timeout)` with `timeout` in seconds or a `timedelta`.
fn replica_acks(v: &Bound<'_, PyAny>) -> PyResult<Option<ReplicaAcks>> {
    if v.is_none() {
        return Ok(None);
    }
    let usage = || PyTypeError::new_err("replica_acks must be None or a (replicas: int, timeout) pair");
    let (n, timeout): (Bound<'_, PyAny>, Bound<'_, PyAny>) = v.extract().map_err(|_| usage())?;
    if n.is_instance_of::<PyBool>() || !n.is_instance_of::<PyInt>() {
        return Err(usage());
    }
    let n: u32 = n.extract().map_err(|_| {
        errors::new(
            v.py(),
            ErrorKind::InvalidConfig,
            "replica_acks: replicas must be an int from 1 to 2**32-1",
        )
    })?;
    Ok(Some(ReplicaAcks::new(n, duration(&timeout, "replica_acks timeout")?)))
}
