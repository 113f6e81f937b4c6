//! A current-thread tokio runtime driven by the threads that wait on it.
//!
//! This is what the blocking facade, the Python binding and the Node addon run on. A caller
//! that would otherwise sleep until its call completes drives the runtime itself
//! ([`Driver::drive`], tokio's `block_on`): the connection's driver task, which does the socket
//! I/O, runs right there, so a call costs one wait per round trip, like the async API. Spawning
//! the call onto a worker and waiting for its result costs a hop there and one back (3 context
//! switches per call on one core); running the future on the caller's thread while another
//! thread drives the connection costs two hops per round trip.
//!
//! Between calls a background thread drives the runtime (watchdog renewals, release
//! notifications, work handed over with [`Driver::spawn`]). It does not sit on the runtime while
//! calls keep coming: it steps off when a caller starts driving and comes back once no drive
//! has started for a while, or at once when counted work ([`Driver::spawn`], [`Driver::kick`])
//! is pending and no caller drives. "A while" is [`IDLE`] after it stepped off, and doubles up
//! to [`IDLE_MAX`] each time it looks and finds drives still starting: in a loop of calls it
//! wakes once per 4 ms instead of twice per call (it woke once per millisecond before 2026-11-26,
//! which cost the Node addon's W1 loop 5 % of its pairs: bench/FINDINGS.md, "Run 2026-11-26-d").

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// This process's id, cached (0: not read yet in this process; `u32::MAX`: no fork handler,
/// read it every time). `std::process::id()` is a `getpid` system call each time, and every
/// call of a binding that can be forked checks it (its objects belong to the process that made
/// them).
static PID: AtomicU32 = AtomicU32::new(0);

#[cfg(unix)]
unsafe extern "C" {
    /// glibc and musl: `child` runs in the child of every `fork()`, whoever calls it.
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> std::ffi::c_int;
}

/// In a forked child: forget the parent's id (an atomic store: async-signal-safe).
#[cfg(unix)]
unsafe extern "C" fn forget_pid_in_child() {
    PID.store(0, Ordering::Relaxed);
}

/// This process's id, without a system call once known; right in a forked child too (the fork
/// handler is registered before the first id is cached).
pub fn process_id() -> u32 {
    static HANDLER: std::sync::Once = std::sync::Once::new();
    HANDLER.call_once(|| {
        #[cfg(unix)]
        // SAFETY: registers a handler that only stores to an atomic; this code is never
        // unloaded while the process runs.
        let ok = unsafe { pthread_atfork(None, None, Some(forget_pid_in_child)) } == 0;
        #[cfg(not(unix))]
        let ok = false;
        if !ok {
            PID.store(u32::MAX, Ordering::Relaxed); // without the handler: read it each time
        }
    });
    match PID.load(Ordering::Relaxed) {
        u32::MAX => std::process::id(),
        0 => {
            let p = std::process::id();
            PID.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

/// How long the background thread stays off the runtime after a drive started, at first.
pub const IDLE: Duration = Duration::from_millis(1);
/// How long it stays off at most, while drives keep starting: work that nobody drives (calls
/// spawned uncounted, timers, release notifications) waits at most about twice this after the
/// last drive, and about twice [`IDLE`] after a single one.
pub const IDLE_MAX: Duration = Duration::from_millis(4);

/// A current-thread runtime, its background thread, and who drives it now.
///
/// Built with [`Driver::start`], which leaks it: the background thread lives as long as the
/// process (or, after `fork()`, is simply absent in the child: a binding that can be forked
/// builds a new driver there and leaks the inherited one).
pub struct Driver {
    rt: tokio::runtime::Runtime,
    state: Mutex<DriveState>,
    /// Wakes the background thread while it is off the runtime.
    idle: Condvar,
    /// Makes the background thread get off the runtime.
    step_off: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct DriveState {
    /// Threads inside [`Driver::drive`] now.
    callers: usize,
    /// Drives started so far (the background thread watches it move).
    calls: u64,
    /// Tasks from [`Driver::spawn`] still running (nobody drives them with `drive`).
    detached: usize,
    /// The background thread is on the runtime (and has not been asked to step off).
    bg_driving: bool,
    /// The background thread should come back now.
    kicked: bool,
    /// Times the background thread woke up off the runtime to look (tests, Debug).
    looks: u64,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("state", &*self.lock()).finish_non_exhaustive()
    }
}

impl Driver {
    /// Build the runtime and start its background thread (named `thread_name`). The driver is
    /// leaked: it lives as long as the process.
    pub fn start(thread_name: &str) -> std::io::Result<&'static Driver> {
        let rt =
            tokio::runtime::Builder::new_current_thread().thread_name(thread_name).enable_all().build()?;
        let d: &'static Driver = Box::leak(Box::new(Driver {
            rt,
            state: Mutex::new(DriveState::default()),
            idle: Condvar::new(),
            step_off: tokio::sync::Notify::new(),
        }));
        std::thread::Builder::new().name(thread_name.to_owned()).spawn(move || d.background())?;
        Ok(d)
    }

    fn lock(&self) -> MutexGuard<'_, DriveState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drive the runtime from this thread until `fut` completes. Must not be called from inside
    /// a tokio runtime (tokio panics): use [`Driver::spawn`] and wait for the task there.
    pub fn drive<F: Future>(&self, fut: F) -> F::Output {
        {
            let mut st = self.lock();
            st.callers += 1;
            st.calls = st.calls.wrapping_add(1);
            if st.bg_driving {
                st.bg_driving = false;
                self.step_off.notify_one();
            }
        }
        struct Leave<'a>(&'a Driver);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                let mut st = self.0.lock();
                st.callers -= 1;
                if st.callers == 0 && st.detached > 0 {
                    st.kicked = true;
                    self.0.idle.notify_one();
                }
            }
        }
        let _leave = Leave(self);
        self.rt.block_on(fut)
    }

    /// Spawn work nobody drives with [`Driver::drive`]: the background thread comes back for it
    /// at once when no caller drives the runtime.
    ///
    /// Tasks spawned on [`Driver::runtime`] directly run too, but only when a caller or the
    /// background thread happens to drive (within about 2 × [`IDLE_MAX`] after the last drive).
    pub fn spawn<F>(&'static self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        struct Done(&'static Driver);
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.lock().detached -= 1;
            }
        }
        {
            let mut st = self.lock();
            st.detached += 1;
            if st.callers == 0 && !st.bg_driving {
                st.kicked = true;
                self.idle.notify_one();
            }
        }
        let done = Done(self);
        self.rt.spawn(async move {
            let _done = done;
            fut.await
        })
    }

    /// Spawn `fut` ([`Driver::spawn`]) and block this thread until it completes; `None` if the
    /// task panicked or was aborted. For threads inside another runtime, which cannot drive.
    pub fn spawn_and_wait<F>(&'static self, fut: F) -> Option<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().ok()
    }

    /// Have the background thread come back to the runtime now if nobody drives it (work was
    /// handed to the runtime some other way than [`Driver::spawn`], such as a dropped future
    /// whose cleanup spawns a task).
    pub fn kick(&self) {
        let mut st = self.lock();
        if st.callers == 0 && !st.bg_driving {
            st.kicked = true;
            self.idle.notify_one();
        }
    }

    /// The runtime (for `enter`, `spawn_blocking`, and tasks that need no prompt start).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }

    /// The background thread: drives the runtime whenever no caller does.
    fn background(&'static self) {
        block_sigpipe();
        let mut st = self.lock();
        loop {
            st.bg_driving = true;
            drop(st);
            self.rt.block_on(self.step_off.notified());
            st = self.lock();
            // A caller asked us off (and cleared `bg_driving`). Come back once no drive has
            // started since the last look, or at once for counted work when no caller drives;
            // look after IDLE, then less often while drives keep starting.
            let mut seen = st.calls;
            let mut wait = IDLE;
            loop {
                st = match self.idle.wait_timeout(st, wait) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                };
                st.looks += 1;
                if st.callers == 0 && (st.kicked || st.detached > 0 || st.calls == seen) {
                    st.kicked = false;
                    break;
                }
                seen = st.calls;
                wait = (wait * 2).min(IDLE_MAX);
            }
        }
    }
}

/// Block SIGPIPE on this thread. The background thread writes to the servers' sockets (watchdog
/// renewals, notifications, reconnects), and a write to a connection the server has reset
/// raises SIGPIPE on the writing thread unless the write says `MSG_NOSIGNAL`, which the
/// vectored writes under redis-rs's connections and writes to Unix sockets do not. Where the process has not ignored
/// SIGPIPE (a C program's default; in a Go program this thread is not Go's, so the Go runtime
/// does not ignore it for us), that kills the process. Blocked, the signal stays pending on
/// this thread alone and the write fails with `EPIPE`, which the connection handles as the
/// lost connection it is. Python, Node and Rust programs ignore SIGPIPE already; threads that
/// call in and drive the runtime themselves are the caller's (the C API holds SIGPIPE off them
/// for each call with a [`SigpipeHold`]).
fn block_sigpipe() {
    #[cfg(unix)]
    // SAFETY: a valid set; pthread_sigmask changes this thread's mask only.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &sigpipe_set(), std::ptr::null_mut());
    }
}

#[cfg(unix)]
fn sigpipe_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset adds a valid signal to it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        set
    }
}

/// SIGPIPE held off the calling thread while this lives: for a caller's thread that drives the
/// runtime itself and whose process may not ignore SIGPIPE (the C API holds one per call). A write
/// to a connection whose server has gone raises SIGPIPE on the writing thread unless it says
/// `MSG_NOSIGNAL`; held off, the write fails with `EPIPE` (a lost connection, reported as an error)
/// instead of ending the process. As libpq does: block SIGPIPE, and at the end take back a SIGPIPE
/// left pending and unblock it again; three system calls. A thread that blocks SIGPIPE itself is
/// left alone, its pending signals with it; so is a nested hold, which finds it blocked by the
/// outer one.
#[derive(Debug)]
#[must_use = "SIGPIPE is unblocked again when the hold is dropped"]
pub struct SigpipeHold {
    /// Whether this hold blocked SIGPIPE (and so unblocks it at its end).
    #[cfg(unix)]
    blocked: bool,
}

impl SigpipeHold {
    /// Block SIGPIPE on this thread, unless it is blocked already.
    #[allow(clippy::new_without_default)]
    pub fn new() -> SigpipeHold {
        #[cfg(unix)]
        // SAFETY: both sets are valid; pthread_sigmask changes this thread's mask only.
        unsafe {
            let mut old: libc::sigset_t = std::mem::zeroed();
            let blocked = libc::pthread_sigmask(libc::SIG_BLOCK, &sigpipe_set(), &mut old) == 0
                && libc::sigismember(&old, libc::SIGPIPE) == 0;
            SigpipeHold { blocked }
        }
        #[cfg(not(unix))]
        SigpipeHold {}
    }
}

impl Drop for SigpipeHold {
    fn drop(&mut self) {
        #[cfg(unix)]
        if self.blocked {
            let set = sigpipe_set();
            // SAFETY: valid sets and a zero timeout; the signal was not pending when this thread
            // blocked it (an unblocked pending signal is delivered at once), so one pending now
            // came from this thread's writes meanwhile; it is taken before the signal is
            // unblocked. Only SIGPIPE is unblocked: the rest of the mask is the thread's as it is.
            unsafe {
                let mut pending: libc::sigset_t = std::mem::zeroed();
                if libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGPIPE) == 1 {
                    let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                    libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
                }
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_spawn_and_wait_and_background_work_all_complete() {
        let d = Driver::start("ferrolock-test").expect("driver");
        assert_eq!(d.drive(async { 6 * 7 }), 42);
        // Spawned work runs with nobody driving: the background thread comes back for it.
        let (tx, rx) = std::sync::mpsc::channel();
        d.spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            tx.send(1).unwrap();
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1));
        // From inside another runtime, spawn and wait instead of driving.
        let other = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let got = other.block_on(async { d.spawn_and_wait(async { "done" }) });
        assert_eq!(got, Some("done"));
        // A panicking task yields None rather than hanging the waiter.
        assert_eq!(d.spawn_and_wait(async { panic!("boom") as u8 }), None);
    }

    /// Whether SIGPIPE is blocked on the calling thread.
    #[cfg(unix)]
    fn sigpipe_blocked() -> bool {
        // SAFETY: reads this thread's mask into a local set.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
            libc::sigismember(&set, libc::SIGPIPE) == 1
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_background_thread_blocks_sigpipe_and_callers_keep_their_mask() {
        let d = Driver::start("ferrolock-test").expect("driver");
        // Control: this test thread, like any caller, has it unblocked (and keeps it so).
        assert!(!sigpipe_blocked());
        d.drive(async {});
        assert!(!sigpipe_blocked());
        // Work nobody drives runs on the background thread.
        let (tx, rx) = std::sync::mpsc::channel();
        d.spawn(async move { tx.send(sigpipe_blocked()).unwrap() });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(true));
    }

    #[test]
    fn the_background_thread_looks_less_often_while_drives_keep_coming_and_still_comes_back() {
        let d = Driver::start("ferrolock-test").expect("driver");
        d.drive(async {});
        // 300 ms of back-to-back drives: ~75 looks; looking once per IDLE would be ~300.
        let looks = d.lock().looks;
        let until = std::time::Instant::now() + Duration::from_millis(300);
        while std::time::Instant::now() < until {
            d.drive(async {});
        }
        let during = d.lock().looks - looks;
        assert!(during <= 150, "the background thread looked {during} times in 300 ms of drives");
        // Then nobody drives: work spawned uncounted (as the Node addon's calls are) still runs,
        // once the background thread is back.
        let (tx, rx) = std::sync::mpsc::channel();
        d.runtime().spawn(async move { tx.send(()).unwrap() });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(()));
    }

    /// A SIGPIPE raised on a thread while a [`SigpipeHold`] is held is taken back when the hold
    /// ends, so a process with SIGPIPE's default action (a C or Go program) survives it. Checked
    /// in a forked child, whose exit status tells (this test process ignores SIGPIPE). Control:
    /// the same child without the hold is ended by the signal.
    #[cfg(unix)]
    #[test]
    fn a_sigpipe_raised_under_a_hold_is_taken_back() {
        fn child_status(hold: bool) -> libc::c_int {
            // SAFETY: the child runs only async-signal-safe calls (signal, pthread_sigmask,
            // sigpending, sigtimedwait, raise, _exit) and no allocation before it exits.
            unsafe {
                let pid = libc::fork();
                assert!(pid >= 0, "fork failed");
                if pid == 0 {
                    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                    let held = hold.then(SigpipeHold::new);
                    libc::raise(libc::SIGPIPE);
                    drop(held);
                    libc::_exit(0);
                }
                let mut status = 0;
                assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
                status
            }
        }
        let status = child_status(true);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child did not survive its SIGPIPE (status {status:#x})"
        );
        let control = child_status(false);
        assert!(
            libc::WIFSIGNALED(control) && libc::WTERMSIG(control) == libc::SIGPIPE,
            "control: the child without a hold survived (status {control:#x})"
        );
    }
}
