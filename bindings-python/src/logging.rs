//! Core `tracing` events (lock lost, renewal failures, acquire retries) to the Python logger
//! `ferrolock`.
//!
//! Events are queued and logged by one forwarding thread, never from the thread that emits them:
//! the core emits while holding its own mutexes, and taking the GIL there could deadlock against
//! a Python thread that holds the GIL and waits for that mutex. The core never puts a password
//! in a message.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber, span};

use crate::runtime::with_python;

static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn logger(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    LOGGER
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("logging")?.call_method1("getLogger", ("ferrolock",))?.unbind())
        })
        .map(|l| l.bind(py))
}

/// Log `message` with the traceback of `err` (for exceptions raised by user callbacks).
pub fn exception(py: Python<'_>, message: &str, err: PyErr) {
    let r = logger(py).and_then(|l| {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("exc_info", err.into_value(py))?;
        l.call_method("error", (message,), Some(&kwargs))
    });
    if let Err(e) = r {
        e.write_unraisable(py, None);
    }
}

struct Sink {
    pid: u32,
    tx: SyncSender<(u8, String)>,
}

static SINK: AtomicPtr<Sink> = AtomicPtr::new(std::ptr::null_mut());

fn sink() -> Option<&'static Sink> {
    let pid = crate::runtime::pid();
    let cur = SINK.load(Ordering::Acquire);
    // SAFETY: pointers in SINK come from Box::leak and are never freed.
    if let Some(s) = unsafe { cur.as_ref() }
        && s.pid == pid
    {
        return Some(s);
    }
    let (tx, rx) = sync_channel(1024);
    let new: &'static mut Sink = Box::leak(Box::new(Sink { pid, tx }));
    let new_ptr: *mut Sink = new;
    match SINK.compare_exchange(cur, new_ptr, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            std::thread::Builder::new().name("ferrolock-log".into()).spawn(move || forward(rx)).ok()?;
            Some(new)
        }
        // SAFETY: as above. Our unused sender is leaked with its receiver dropped.
        Err(other) => unsafe { other.as_ref() },
    }
}

fn forward(rx: Receiver<(u8, String)>) {
    while let Ok((level, msg)) = rx.recv() {
        with_python(|py| {
            if let Err(e) = logger(py).and_then(|l| l.call_method1("log", (level, msg))) {
                e.write_unraisable(py, None);
            }
        });
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let text = format!("{value:?}");
            let text = text.strip_prefix("ferrolock: ").unwrap_or(&text);
            self.0.insert_str(0, text);
        } else {
            let _ = write!(self.0, " {}={:?}", field.name(), value);
        }
    }
}

/// Forwards DEBUG and above; Python's logging configuration decides what is shown.
struct Forward;

impl Subscriber for Forward {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::DEBUG
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let level = match *event.metadata().level() {
            Level::ERROR => 40,
            Level::WARN => 30,
            Level::INFO => 20,
            _ => 10,
        };
        let mut m = Message(String::new());
        event.record(&mut m);
        if let Some(s) = sink() {
            let _ = s.tx.try_send((level, m.0)); // never block the core; drop when flooded
        }
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// Install the forwarding subscriber (a no-op if the process already has one).
pub fn install() {
    let _ = tracing::subscriber::set_global_default(Forward);
}
