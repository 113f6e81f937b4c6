//! Core errors as JS `Error` objects with `code` set to the core's stable string code.
//!
//! napi's own `Error` only carries its fixed `Status` codes across an async boundary, so results
//! travel as `Reply<T>` and become JS values (or a rejection with our error object) on the JS
//! thread, in `ToNapiValue`.

use napi::bindgen_prelude::{FromNapiValue, ToNapiValue, Unknown};
use napi::{JsError, sys};

/// A core result on its way to JS.
#[derive(Debug)]
pub struct Reply<T>(pub ferrolock::Result<T>);

/// What becomes of a reply that never reaches JS because its thread was torn down (a worker
/// terminated while the call ran): a grant is released at once, like a cancelled acquire's, instead
/// of staying taken for a lease by a hold nobody can see. Nothing else needs undoing.
pub trait Undelivered: Sized {
    fn undelivered(self) {}

    /// Whether the reply is no longer wanted when it reaches the JS thread: a grant whose client
    /// was closed in between (the close and the promise's settling can fall in one turn). It is
    /// then handed to `undelivered` and the promise rejects with CLOSED, as the core's acquire
    /// does for a grant that returns after the close.
    fn outlived(&self) -> bool {
        false
    }
}

impl Undelivered for () {}
impl Undelivered for crate::client::Client {}
impl Undelivered for crate::client::LockInfo {}
impl<T: Undelivered> Undelivered for Option<T> {
    fn undelivered(self) {
        if let Some(v) = self {
            v.undelivered();
        }
    }

    fn outlived(&self) -> bool {
        self.as_ref().is_some_and(T::outlived)
    }
}

impl<T> Reply<T> {
    pub fn err(e: ferrolock::Error) -> Self {
        Reply(Err(e))
    }
}

impl<T> From<ferrolock::Result<T>> for Reply<T> {
    fn from(r: ferrolock::Result<T>) -> Self {
        Reply(r)
    }
}

impl<T: ToNapiValue> ToNapiValue for Reply<T> {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        match val.0 {
            // SAFETY: called by napi on the JS thread with a live env.
            Ok(v) => unsafe { T::to_napi_value(env, v) },
            // SAFETY: as above.
            Err(e) => Err(unsafe { to_js_error(env, &e) }),
        }
    }
}

/// A JS `Error` with `message` and `code` (the kind's name), held by reference inside a napi
/// error so that napi throws (or rejects with) exactly this object.
///
/// # Safety
/// `env` must be the live env of the current JS thread.
pub unsafe fn to_js_error(env: sys::napi_env, e: &ferrolock::Error) -> napi::Error {
    // SAFETY: env is live (caller contract).
    let raw = unsafe { error_value(env, e) };
    // SAFETY: raw was just created in env.
    match unsafe { Unknown::from_napi_value(env, raw) } {
        Ok(v) => napi::Error::from(v),
        Err(fail) => fail,
    }
}

/// The JS `Error` of `e`; the error behind it (the failure that ended a wait) as its `cause`,
/// a property as `new Error(message, { cause })` makes it (own, not enumerable).
///
/// # Safety
/// `env` must be the live env of the current JS thread.
unsafe fn error_value(env: sys::napi_env, e: &ferrolock::Error) -> sys::napi_value {
    // SAFETY: env is live (caller contract).
    let raw = unsafe { JsError::from(napi::Error::new(e.kind().name(), e.message())).into_value(env) };
    if let Some(cause) = e.cause() {
        let property = sys::napi_property_descriptor {
            utf8name: c"cause".as_ptr(),
            name: std::ptr::null_mut(),
            method: None,
            getter: None,
            setter: None,
            // SAFETY: as above.
            value: unsafe { error_value(env, cause) },
            attributes: sys::PropertyAttributes::writable | sys::PropertyAttributes::configurable,
            data: std::ptr::null_mut(),
        };
        // SAFETY: raw is an object of env; the descriptor lives across the call. A failure
        // (a pending exception) only leaves the cause out.
        unsafe { sys::napi_define_properties(env, raw, 1, &property) };
    }
    raw
}
