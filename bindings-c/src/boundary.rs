//! The one panic boundary every `extern "C"` function runs behind, plus the pointer helpers.

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

use ferrolock::{Error, ErrorKind};

use crate::error::ferrolock_error;
use crate::result::ferrolock_result;

thread_local! {
    /// How many boundary calls are running on this thread (a callback may call back in).
    static INSIDE: Cell<u32> = const { Cell::new(0) };
}
static QUIET: Once = Once::new();

/// Wraps the process's panic hook (once, at the first call): a panic caught at this boundary is
/// reported to the caller as an error, not also printed to the host program's stderr by Rust's
/// default hook (its message may carry caller data). Every other panic still reaches the hook
/// that was there before.
fn install_quiet_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if INSIDE.with(Cell::get) == 0 {
            previous(info);
        }
    }));
}

/// `catch_unwind`, with the panic kept off stderr (see [`install_quiet_hook`]).
fn guarded<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    QUIET.call_once(install_quiet_hook);
    INSIDE.with(|n| n.set(n.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(f));
    INSIDE.with(|n| n.set(n.get() - 1));
    r
}

/// Run `f`, turning a panic into `fallback`. For functions that return a value, not a result.
pub(crate) fn catch<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    guarded(f).unwrap_or(fallback)
}

/// Run `f` and map its outcome to a result code. On failure the error is handed to the caller
/// through `out_error` when it is not NULL; on success `out_error` is not touched.
///
/// # Safety
/// `out_error` is NULL or valid for one pointer write.
pub(crate) unsafe fn call(
    out_error: *mut *mut ferrolock_error,
    f: impl FnOnce() -> Result<(), Error>,
) -> ferrolock_result {
    let outcome = {
        // Held off this thread for the call: see `SigpipeHold` (a C program's default ends it).
        let _held = ferrolock::driver::SigpipeHold::new();
        let _no_cancel = CancelHold::new();
        guarded(f).unwrap_or_else(|p| Err(panic_error(p.as_ref())))
    };
    match outcome {
        Ok(()) => ferrolock_result::Ok,
        Err(e) => {
            let code = ferrolock_result::from_kind(e.kind());
            if !out_error.is_null() {
                let boxed = Box::into_raw(Box::new(ferrolock_error::new(&e)));
                // SAFETY: checked non-NULL; the caller promises it is valid for a write.
                unsafe { out_error.write(boxed) };
            }
            code
        }
    }
}

/// `pthread_cancel` held off the calling thread while this lives. glibc cancels a thread by
/// unwinding it, and a forced unwind that meets the boundary's `catch_unwind` aborts the whole
/// process ("FATAL: exception not rethrown"); it would also skip the undo of an acquire in
/// flight. So a call runs with cancellation disabled, as a library that holds locks should: a
/// `pthread_cancel` sent meanwhile stays pending and acts at the thread's next cancellation point
/// after the call returns. The previous state is put back, so a nested call (from a callback)
/// leaves the outer one's state alone. (`ferrolock_cancel` is how a wait is ended early.)
struct CancelHold {
    #[cfg(unix)]
    old: std::ffi::c_int,
}

// The value of <pthread.h>: glibc and musl; the BSDs' and macOS's.
#[cfg(any(target_os = "linux", target_os = "android"))]
const PTHREAD_CANCEL_DISABLE: std::ffi::c_int = 1;
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
const PTHREAD_CANCEL_DISABLE: std::ffi::c_int = 0;

#[cfg(unix)]
unsafe extern "C" {
    // Not in the libc crate for Linux targets.
    fn pthread_setcancelstate(state: std::ffi::c_int, oldstate: *mut std::ffi::c_int) -> std::ffi::c_int;
}

impl CancelHold {
    fn new() -> CancelHold {
        #[cfg(unix)]
        {
            let mut old: std::ffi::c_int = PTHREAD_CANCEL_DISABLE;
            // SAFETY: a valid out-pointer; it changes the calling thread's state only.
            unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
            CancelHold { old }
        }
        #[cfg(not(unix))]
        CancelHold {}
    }
}

impl Drop for CancelHold {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: a valid out-pointer; it puts back the state read in `new` (the hold lives in
        // one call's frame, on the thread that made it).
        unsafe {
            let mut was: std::ffi::c_int = 0;
            pthread_setcancelstate(self.old, &mut was);
        }
    }
}

fn panic_error(payload: &(dyn Any + Send)) -> Error {
    // Only literal panic messages are shown: formatted ones could carry caller data.
    let detail = payload.downcast_ref::<&'static str>().copied().unwrap_or("(no detail)");
    Error::new(ErrorKind::Internal, format!("a panic was caught at the C boundary: {detail}"))
}

/// `NULL_ARGUMENT` if `p` is NULL.
pub(crate) fn non_null<T>(p: *const T, what: &str) -> Result<(), Error> {
    if p.is_null() {
        return Err(Error::new(ErrorKind::NullArgument, format!("{what} is NULL")));
    }
    Ok(())
}

/// A caller's byte string: NULL is accepted only with length 0.
///
/// # Safety
/// A non-NULL `ptr` is valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8], Error> {
    if ptr.is_null() {
        if len == 0 {
            return Ok(&[]);
        }
        return Err(Error::new(ErrorKind::NullArgument, format!("{what} is NULL with a non-zero length")));
    }
    if isize::try_from(len).is_err() {
        return Err(Error::new(ErrorKind::InvalidArgument, format!("{what}: length out of range")));
    }
    // SAFETY: the caller promises `len` readable bytes at `ptr`.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A caller's UTF-8 string (ptr + len, no NUL needed); interior NULs are refused.
///
/// # Safety
/// As for [`bytes`].
pub(crate) unsafe fn utf8<'a>(
    ptr: *const std::ffi::c_char,
    len: usize,
    what: &str,
    kind: ErrorKind,
) -> Result<&'a str, Error> {
    // SAFETY: forwarded contract.
    let b = unsafe { bytes(ptr.cast(), len, what) }?;
    let s = std::str::from_utf8(b).map_err(|_| Error::new(kind, format!("{what} is not valid UTF-8")))?;
    if s.contains('\0') {
        return Err(Error::new(kind, format!("{what} contains a NUL byte")));
    }
    Ok(s)
}

/// Write `value` through a checked out-pointer.
///
/// # Safety
/// `out` is non-NULL (checked by the caller) and valid for one write.
pub(crate) unsafe fn write<T>(out: *mut T, value: T) {
    // SAFETY: forwarded contract.
    unsafe { out.write(value) };
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used)]
mod tests {
    use std::ffi::CStr;

    use super::*;
    use crate::error::{ferrolock_error_code, ferrolock_error_free, ferrolock_error_message};

    #[test]
    fn a_panic_becomes_internal_with_an_error_object() {
        let mut err: *mut ferrolock_error = std::ptr::null_mut();
        // SAFETY: `err` is a valid out-pointer.
        let rc = unsafe { call(&mut err, || panic!("boom")) };
        assert_eq!(rc, ferrolock_result::Internal);
        assert!(!err.is_null());
        // SAFETY: `err` was just made by `call`.
        unsafe {
            assert_eq!(ferrolock_error_code(err), 500);
            let msg = CStr::from_ptr(ferrolock_error_message(err)).to_str().unwrap();
            assert!(msg.starts_with("INTERNAL: a panic was caught at the C boundary: boom"), "{msg}");
            ferrolock_error_free(err);
        }
        assert_eq!(catch(7, || -> i32 { panic!("x") }), 7);
    }

    // Rust's default hook printed a caught panic's message to the host's stderr as well. The
    // hook that was there before ours (here a recorder; in a program, usually the default one)
    // sees only panics outside the boundary. Control: the recorder sees a panic outside it.
    #[test]
    fn a_caught_panic_reaches_no_earlier_hook_and_others_still_do() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static SEEN: AtomicUsize = AtomicUsize::new(0);
        std::panic::set_hook(Box::new(|info| {
            if info.payload().downcast_ref::<&str>().is_some_and(|m| m.starts_with("hook-test")) {
                SEEN.fetch_add(1, Ordering::SeqCst);
            }
        }));
        install_quiet_hook(); // as the first boundary call does, over the recorder
        let mut err: *mut ferrolock_error = std::ptr::null_mut();
        // SAFETY: `err` is a valid out-pointer; the error is freed below.
        unsafe {
            assert_eq!(call(&mut err, || panic!("hook-test inside")), ferrolock_result::Internal);
            crate::error::ferrolock_error_free(err);
        }
        assert_eq!(catch(1, || -> i32 { panic!("hook-test inside") }), 1);
        assert_eq!(SEEN.load(Ordering::SeqCst), 0, "a caught panic reached the earlier hook");
        assert!(catch_unwind(|| panic!("hook-test outside")).is_err());
        assert_eq!(SEEN.load(Ordering::SeqCst), 1, "control: a panic outside the boundary was not seen");
    }

    #[test]
    fn success_leaves_the_error_untouched_and_null_error_pointers_are_fine() {
        let sentinel = 0x5a5a as *mut ferrolock_error;
        let mut err = sentinel;
        // SAFETY: valid out-pointer / NULL.
        unsafe {
            assert_eq!(call(&mut err, || Ok(())), ferrolock_result::Ok);
            assert_eq!(err, sentinel);
            let rc = call(std::ptr::null_mut(), || Err(Error::new(ErrorKind::NotHeld, "x")));
            assert_eq!(rc, ferrolock_result::NotHeld);
        }
    }

    /// Whether SIGPIPE is blocked on / pending for the calling thread.
    #[cfg(unix)]
    fn sigpipe_blocked_and_pending() -> (bool, bool) {
        // SAFETY: zeroed sets filled in by the calls.
        unsafe {
            let (mut mask, mut pending): (libc::sigset_t, libc::sigset_t) =
                (std::mem::zeroed(), std::mem::zeroed());
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask);
            libc::sigpending(&mut pending);
            (libc::sigismember(&mask, libc::SIGPIPE) == 1, libc::sigismember(&pending, libc::SIGPIPE) == 1)
        }
    }

    /// The child's half of the test below: with SIGPIPE at its default, write to a socket whose
    /// peer has closed, inside a boundary call or (the control) outside one.
    #[cfg(unix)]
    fn sigpipe_child(mode: &str) -> ! {
        let mut fds = [0; 2];
        // SAFETY: a valid two-int array; the signal call sets the default action.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            assert_eq!(libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()), 0);
            libc::close(fds[1]);
        }
        // SAFETY: fds[0] is open; one byte from a static buffer.
        let write = || unsafe { libc::write(fds[0], b"x".as_ptr().cast(), 1) };
        let epipe = || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPIPE);
        match mode {
            "inside" => {
                let mut failed_with_epipe = false;
                // SAFETY: NULL error pointer.
                let rc = unsafe {
                    call(std::ptr::null_mut(), || {
                        failed_with_epipe = write() == -1 && epipe();
                        Ok(())
                    })
                };
                assert_eq!(rc, ferrolock_result::Ok);
                assert!(failed_with_epipe, "the write did not fail with EPIPE");
                assert_eq!(sigpipe_blocked_and_pending(), (false, false), "the mask was not restored");
                // A caller that blocks SIGPIPE itself keeps its mask and the signal its write raised.
                // SAFETY: a set initialised by sigemptyset; this thread's mask only.
                unsafe {
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut set);
                    libc::sigaddset(&mut set, libc::SIGPIPE);
                    libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                }
                // SAFETY: NULL error pointer.
                let rc = unsafe {
                    call(std::ptr::null_mut(), || {
                        write();
                        Ok(())
                    })
                };
                assert_eq!(rc, ferrolock_result::Ok);
                assert_eq!(sigpipe_blocked_and_pending(), (true, true), "the caller's own block was changed");
            }
            _ => {
                write();
            }
        }
        std::process::exit(0)
    }

    // A C program's default action for SIGPIPE ends it, and a call writes to the servers' sockets
    // on the calling thread. Run in a child process (this test binary again, this test only),
    // since the signal's action is process-wide. Control: the same write outside a call kills it.
    #[cfg(unix)]
    #[test]
    fn a_call_keeps_sigpipe_from_ending_the_program_and_restores_the_mask() {
        use std::os::unix::process::ExitStatusExt;
        const CHILD: &str = "FERROLOCK_C_SIGPIPE_CHILD";
        if let Ok(mode) = std::env::var(CHILD) {
            sigpipe_child(&mode);
        }
        let run = |mode: &str| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "boundary::tests::a_call_keeps_sigpipe_from_ending_the_program_and_restores_the_mask",
                ])
                .args(["--test-threads=1", "--nocapture"])
                .env(CHILD, mode)
                .output()
                .unwrap()
        };
        let inside = run("inside");
        assert!(
            inside.status.success(),
            "inside a call: {:?}\n{}",
            inside.status,
            String::from_utf8_lossy(&inside.stderr)
        );
        let outside = run("outside");
        assert_eq!(
            outside.status.signal(),
            Some(libc::SIGPIPE),
            "control: the write outside a call did not raise SIGPIPE"
        );
    }

    #[test]
    fn byte_and_string_arguments() {
        // SAFETY: the pointers below are NULL or valid for their lengths.
        unsafe {
            assert_eq!(bytes(std::ptr::null(), 0, "n").unwrap(), b"");
            assert_eq!(bytes(std::ptr::null(), 3, "n").unwrap_err().kind(), ErrorKind::NullArgument);
            assert_eq!(bytes(b"abc".as_ptr(), 2, "n").unwrap(), b"ab");
            let k = ErrorKind::InvalidUrl;
            assert_eq!(utf8(c"redis://x".as_ptr(), 9, "url", k).unwrap(), "redis://x");
            assert_eq!(utf8(c"a\xffb".as_ptr(), 3, "url", k).unwrap_err().kind(), k);
            assert_eq!(utf8(b"a\0b".as_ptr().cast(), 3, "url", k).unwrap_err().kind(), k);
        }
    }
}
