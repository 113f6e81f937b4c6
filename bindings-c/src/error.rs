//! The owned error object and the functions that describe result codes.

use std::ffi::{CStr, CString, c_char};

use ferrolock::Error;

use crate::boundary::{call, catch, non_null, write};
use crate::result::{self, ferrolock_result};

/// Details of a failed call: its result code and a message. Owned by the caller, who frees it
/// with ferrolock_error_free(). Messages never contain passwords.
#[derive(Debug)]
pub struct ferrolock_error {
    code: u32,
    message: CString,
    cause: Option<Box<ferrolock_error>>,
}

impl ferrolock_error {
    pub(crate) fn new(e: &Error) -> Self {
        let text = format!("{}: {}", e.kind().name(), e.message()).replace('\0', " ");
        ferrolock_error {
            code: ferrolock_result::from_kind(e.kind()) as u32,
            message: CString::new(text).unwrap_or_default(),
            cause: e.cause().map(|c| Box::new(ferrolock_error::new(c))),
        }
    }
}

/// The result code of `error` (one of ::ferrolock_result); 0 when `error` is NULL.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_error_code(error: *const ferrolock_error) -> u32 {
    // SAFETY: a non-NULL `error` comes from this library and is not yet freed (documented).
    catch(0, || unsafe { error.as_ref() }.map_or(0, |e| e.code))
}

/// The message of `error`: a NUL-terminated UTF-8 string, `"NOT_HELD: …"`, valid until the
/// error is freed. An empty string when `error` is NULL.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_error_message(error: *const ferrolock_error) -> *const c_char {
    catch(c"".as_ptr(), || {
        // SAFETY: as for ferrolock_error_code().
        unsafe { error.as_ref() }.map_or(c"".as_ptr(), |e| e.message.as_ptr())
    })
}

/// The failure behind `error`, or NULL when it has none (or `error` is NULL): for
/// ::FERROLOCK_RESULT_ACQUIRE_TIMEOUT or ::FERROLOCK_RESULT_CANCELLED from an acquire whose latest
/// attempt failed (a server that could not be reached: ::FERROLOCK_RESULT_TIMEOUT,
/// ::FERROLOCK_RESULT_CONNECTION; a grant not replicated), that attempt's error; NULL when the
/// wait ended because another owner held the lock. Read it with ferrolock_error_code() and
/// ferrolock_error_message(). Owned by `error`: valid until `error` is freed, never freed itself.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_error_cause(error: *const ferrolock_error) -> *const ferrolock_error {
    catch(std::ptr::null(), || {
        // SAFETY: as for ferrolock_error_code().
        unsafe { error.as_ref() }
            .and_then(|e| e.cause.as_deref())
            .map_or(std::ptr::null(), |c| c as *const ferrolock_error)
    })
}

/// Free an error. NULL is a no-op. The pointer must not be used afterwards.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_error_free(error: *mut ferrolock_error) {
    catch((), || {
        if !error.is_null() {
            // SAFETY: a non-NULL `error` was made by Box::into_raw in this library and is freed once.
            drop(unsafe { Box::from_raw(error) });
        }
    })
}

/// The stable name of a result code (`"OK"`, `"NOT_HELD"`, …): a static NUL-terminated string,
/// or `"UNKNOWN"` for a code this library does not define. Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn ferrolock_result_name(code: u32) -> *const c_char {
    catch(c"UNKNOWN".as_ptr(), || result::name_of(code).map_or(c"UNKNOWN", |n| n).as_ptr())
}

/// Every error code this library defines (all result codes except OK), in ascending order, as a
/// static array: `*out_codes` points at `*out_len` values. Bindings walk it to prove their
/// mapping is total.
///
/// @return ::FERROLOCK_RESULT_NULL_ARGUMENT if an out-pointer is NULL.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_result_list(
    out_codes: *mut *const u32,
    out_len: *mut usize,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: `out_error` is NULL or writable (documented contract).
    unsafe {
        call(out_error, || {
            non_null(out_codes, "out_codes")?;
            non_null(out_len, "out_len")?;
            write(out_codes, result::ALL_CODES.as_ptr());
            write(out_len, result::ALL_CODES.len());
            Ok(())
        })
    }
}

/// The version of the C ABI this header describes: raised whenever a struct, an enum or a
/// function signature of the header changes incompatibly (before 1.0, any release may do so).
pub const FERROLOCK_ABI_VERSION: u32 = 2;

/// The C ABI version of the library loaded. A program that loads the shared library, which may
/// be another build than the header it was compiled with, checks at start that it equals
/// ::FERROLOCK_ABI_VERSION: a struct that grew (an out-parameter like ::ferrolock_lock_info)
/// would otherwise be read or written past its end.
#[unsafe(no_mangle)]
pub extern "C" fn ferrolock_abi_version() -> u32 {
    FERROLOCK_ABI_VERSION
}

/// The library version, e.g. `"0.1.0"`: a static NUL-terminated string.
#[unsafe(no_mangle)]
pub extern "C" fn ferrolock_version() -> *const c_char {
    const V: &[u8] = concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes();
    const VERSION: &CStr = match CStr::from_bytes_with_nul(V) {
        Ok(v) => v,
        Err(_) => c"unknown",
    };
    catch(c"unknown".as_ptr(), || VERSION.as_ptr())
}
