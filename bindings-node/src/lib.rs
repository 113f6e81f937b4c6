//! Node binding of ferrolock (napi-rs): a thin translation layer over the async core.
//!
//! Classes `Client`, `Lock` and `Held` map onto `ferrolock::{Client, Lock, Guard}`; every call
//! runs on the addon's own runtime (`driver.rs`): on the JS thread while its event loop would
//! otherwise sleep, on a background thread otherwise; it never blocks the event loop. Errors reach JS as `Error`
//! objects whose `code` is the core's stable string code (`ErrorKind::name()`). `index.js` adds
//! the parts that are plain JS: `AbortSignal` plumbing, `Symbol.asyncDispose`, `withLock`.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod client;
mod convert;
mod driver;
mod held;
mod lock;
mod reply;

use napi_derive::napi;

pub use client::{Client, Redlock};
pub use held::Held;
pub use lock::{CancelToken, Lock, cancel, cancel_token};

/// One entry of the core's error table.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct ErrorCodeInfo {
    /// The stable string code, as found in `err.code` (e.g. `"NOT_HELD"`).
    pub name: String,
    /// The stable numeric code (ranges: 1xx argument, 2xx connection, 3xx lock state,
    /// 4xx protocol, 5xx internal).
    pub code: u32,
    /// Whether retrying later may succeed (connection trouble, timeouts, quorum, replicas).
    pub transient: bool,
}

/// Every error code the library can produce, in numeric order (the core's `ErrorKind::ALL`).
#[napi]
pub fn error_codes() -> Vec<ErrorCodeInfo> {
    ferrolock::ErrorKind::ALL
        .iter()
        .map(|k| ErrorCodeInfo { name: k.name().to_owned(), code: k.code(), transient: k.is_transient() })
        .collect()
}

/// The wire-format version implemented (docs/PROTOCOL.md).
#[napi]
pub const PROTOCOL_VERSION: u32 = ferrolock::PROTOCOL_VERSION;

/// Test hook: an error of the kind named `name`, thrown through the same mapping as every other
/// call, so the test suite can prove the mapping is total over the core's table.
#[napi(skip_typescript, js_name = "_errorOfKind")]
pub fn error_of_kind(name: String) -> reply::Reply<()> {
    match ferrolock::ErrorKind::from_name(&name) {
        Some(kind) => reply::Reply::err(ferrolock::Error::new(kind, format!("test error of kind {name}"))),
        None => reply::Reply::err(ferrolock::Error::new(
            ferrolock::ErrorKind::InvalidArgument,
            "no error kind of that name",
        )),
    }
}
