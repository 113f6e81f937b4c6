//! Cancellation tokens for ferrolock_lock_acquire_cancellable().

use tokio::sync::watch;

use crate::boundary::{call, catch, non_null, write};
use crate::error::ferrolock_error;
use crate::handles::Table;
use crate::result::ferrolock_result;

/// A cancellation token (opaque handle): once triggered, every acquire waiting on it returns
/// ::FERROLOCK_RESULT_CANCELLED. Thread-safe; trigger it from any thread, but not from a signal
/// handler (ferrolock_cancel_trigger() takes a lock and may allocate: it is not
/// async-signal-safe; have the handler wake a thread that triggers it).
#[derive(Debug)]
pub struct ferrolock_cancel {
    _opaque: [u8; 0],
}

pub(crate) struct Cancel {
    tx: watch::Sender<bool>,
}

impl Cancel {
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

pub(crate) static CANCELS: Table<Cancel> = Table::new("cancel");

/// Make a cancellation token (not triggered).
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_cancel_new(
    out_cancel: *mut *mut ferrolock_cancel,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_cancel, "out_cancel")?;
            write(out_cancel, CANCELS.insert(Cancel { tx: watch::Sender::new(false) }));
            Ok(())
        })
    }
}

/// Trigger the token: acquires using it stop waiting and return ::FERROLOCK_RESULT_CANCELLED,
/// and whatever an interrupted attempt may have taken in Redis is undone. Idempotent.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_cancel_trigger(
    cancel: *const ferrolock_cancel,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            CANCELS.get(cancel)?.tx.send_replace(true);
            Ok(())
        })
    }
}

/// Free a token. NULL, or a token already freed, is a no-op. An acquire using it keeps it alive
/// until it returns.
#[unsafe(no_mangle)]
pub extern "C" fn ferrolock_cancel_free(cancel: *mut ferrolock_cancel) {
    catch((), || CANCELS.remove(cancel))
}
