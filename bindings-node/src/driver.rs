//! Where the addon's futures run, and how their promises settle.
//!
//! napi-rs's `async fn` runs each call on its multi-thread tokio runtime and settles the promise
//! through a threadsafe function created for that call: on one core that is ~5 context switches
//! per call (the JS thread wakes a worker, workers hand the connection's driver task between
//! them, the result comes back through libuv), against 1 for the async Rust core. Here instead:
//!
//! * One process-wide **current-thread** runtime runs every client, its connection and every
//!   call. Whoever drives it runs them all on its own thread.
//! * A JS thread drives it when it would otherwise sleep: a libuv *prepare* handle runs just
//!   before libuv blocks for I/O; when calls of this thread are pending, it drives the runtime
//!   until libuv has something to do (libuv's own epoll fd turns readable, or its next timer is
//!   due). So a call's Redis round trip runs on the JS thread while the event loop is idle
//!   anyway: the event loop is never blocked longer than it would have slept.
//! * Promises settle through **one** threadsafe function per JS thread (kept referenced only
//!   while calls are pending, so pending calls keep the process alive as before). Settled from
//!   the JS thread itself, that costs an eventfd write and read, not a thread switch.
//! * A background thread drives the runtime whenever no JS thread does (renewals, release
//!   notifications, calls while JS code runs): it steps off when a JS thread starts driving and
//!   comes back once none has for a while (1 to 4 ms: core's [`Driver`]).

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Poll, Waker};
use std::time::Duration;

use ferrolock::driver::Driver;
use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi::{Env, JsError, Status, sys};
use tokio::io::unix::AsyncFd;

use crate::reply::{Reply, Undelivered};

static DRIVER: OnceLock<Result<&'static Driver, String>> = OnceLock::new();

/// The addon's runtime (core's [`Driver`]). Calls are spawned on it uncounted
/// (`runtime().spawn`): a JS thread drives them in [`on_prepare`], and the background thread
/// picks them up only once no JS thread has driven for a while, so JS code running between
/// calls does not pull it back on at once.
fn driver() -> napi::Result<&'static Driver> {
    let d = DRIVER.get_or_init(|| {
        Driver::start("ferrolock").map_err(|e| format!("cannot start the tokio runtime: {e}"))
    });
    d.clone().map_err(|e| napi::Error::new(Status::GenericFailure, e))
}

/// libuv, as exported by node to addons.
#[allow(non_camel_case_types)]
type uv_loop = c_void;
unsafe extern "C" {
    fn uv_handle_size(kind: c_int) -> usize;
    fn uv_prepare_init(lp: *mut uv_loop, handle: *mut c_void) -> c_int;
    fn uv_prepare_start(handle: *mut c_void, cb: unsafe extern "C" fn(*mut c_void)) -> c_int;
    fn uv_prepare_stop(handle: *mut c_void) -> c_int;
    fn uv_unref(handle: *mut c_void);
    fn uv_close(handle: *mut c_void, cb: unsafe extern "C" fn(*mut c_void));
    fn uv_backend_fd(lp: *const uv_loop) -> c_int;
    fn uv_backend_timeout(lp: *const uv_loop) -> c_int;
}
/// `UV_PREPARE` in libuv's `uv_handle_type`.
const UV_PREPARE: c_int = 9;

#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}
unsafe extern "C" {
    fn poll(fds: *mut PollFd, nfds: u64, timeout: c_int) -> c_int;
}

/// Whether `fd` is readable now (libuv's epoll fd: libuv has I/O to handle).
fn readable_now(fd: RawFd) -> bool {
    let mut p = PollFd { fd, events: 1 /* POLLIN */, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    unsafe { poll(&mut p, 1, 0) > 0 }
}

/// libuv's epoll fd, watched by the runtime's reactor (never closed by us).
struct UvFd(RawFd);
impl AsRawFd for UvFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The threadsafe function promises settle through; `None` once node has finalized it.
type TsfnSlot = Mutex<Option<SendTsfn>>;
struct SendTsfn(sys::napi_threadsafe_function);
// SAFETY: a threadsafe function may be called from any thread (its purpose); the slot's mutex
// keeps it from being finalized meanwhile.
unsafe impl Send for SendTsfn {}

/// One JS thread's side: its event loop, its prepare handle, its threadsafe function.
struct EnvLoop {
    env: sys::napi_env,
    /// Set at env teardown: the calls of this thread still running are dropped (see `promise`).
    gone: tokio::sync::watch::Sender<bool>,
    uv: *mut uv_loop,
    prepare: *mut c_void,
    tsfn: Arc<TsfnSlot>,
    raw_tsfn: sys::napi_threadsafe_function,
    /// Calls of this thread whose promise has not settled yet.
    pending: Cell<usize>,
    uv_fd: RefCell<Option<AsyncFd<UvFd>>>,
    /// Calls of this thread settled while it drives the runtime (in `on_prepare`).
    done: RefCell<Vec<Completion>>,
    /// Wakes `on_prepare`'s drive when `done` gets one.
    waker: RefCell<Option<Waker>>,
    /// The async context promises settled from `on_prepare` run their callbacks in.
    async_ctx: sys::napi_async_context,
}

thread_local! {
    static ENV_LOOP: RefCell<Option<Rc<EnvLoop>>> = const { RefCell::new(None) };
}

fn check(status: sys::napi_status, what: &str) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(Status::GenericFailure, format!("ferrolock: {what} failed ({status})")))
    }
}

/// This JS thread's [`EnvLoop`], set up on first use.
fn env_loop(env: sys::napi_env) -> napi::Result<Rc<EnvLoop>> {
    if let Some(el) = ENV_LOOP.with(|s| s.borrow().clone())
        && el.env == env
    {
        return Ok(el);
    }
    let slot: Arc<TsfnSlot> = Arc::new(Mutex::new(None));
    let mut raw_tsfn = std::ptr::null_mut();
    let mut name = std::ptr::null_mut();
    // SAFETY: called on the JS thread of a live env (from a napi callback).
    unsafe {
        check(
            sys::napi_create_string_utf8(env, c"ferrolock".as_ptr(), 9, &mut name),
            "napi_create_string_utf8",
        )?;
        check(
            sys::napi_create_threadsafe_function(
                env,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                name,
                0,
                1,
                Arc::into_raw(slot.clone()) as *mut c_void,
                Some(tsfn_finalized),
                std::ptr::null_mut(),
                Some(settle_on_js_thread),
                &mut raw_tsfn,
            ),
            "napi_create_threadsafe_function",
        )?;
        check(sys::napi_unref_threadsafe_function(env, raw_tsfn), "napi_unref_threadsafe_function")?;
    }
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(SendTsfn(raw_tsfn));

    let mut uv: *mut sys::uv_loop_s = std::ptr::null_mut();
    // SAFETY: as above; the prepare handle's memory is sized by libuv itself and freed in
    // `prepare_closed` after uv_close.
    let prepare = unsafe {
        check(sys::napi_get_uv_event_loop(env, &mut uv), "napi_get_uv_event_loop")?;
        let words = uv_handle_size(UV_PREPARE).div_ceil(8).max(16);
        let mem: &mut [u64] = Box::leak(vec![0u64; words + 1].into_boxed_slice());
        mem[0] = words as u64 + 1; // remember the length for the free
        let handle = mem[1..].as_mut_ptr().cast::<c_void>();
        if uv_prepare_init(uv.cast(), handle) != 0 || uv_prepare_start(handle, on_prepare) != 0 {
            return Err(napi::Error::new(Status::GenericFailure, "ferrolock: uv_prepare_init failed"));
        }
        uv_unref(handle); // never keeps the loop alive by itself
        handle
    };
    let mut async_ctx = std::ptr::null_mut();
    // SAFETY: JS thread, live env; `name` was made above.
    unsafe {
        check(sys::napi_async_init(env, std::ptr::null_mut(), name, &mut async_ctx), "napi_async_init")?
    };
    let el = Rc::new(EnvLoop {
        env,
        gone: tokio::sync::watch::Sender::new(false),
        uv: uv.cast(),
        prepare,
        tsfn: slot,
        raw_tsfn,
        pending: Cell::new(0),
        uv_fd: RefCell::new(None),
        done: RefCell::new(Vec::new()),
        waker: RefCell::new(None),
        async_ctx,
    });
    ENV_LOOP.with(|s| *s.borrow_mut() = Some(el.clone()));
    // SAFETY: env is live; the hook runs on this thread at env teardown.
    unsafe {
        check(
            sys::napi_add_env_cleanup_hook(env, Some(env_teardown), std::ptr::null_mut()),
            "napi_add_env_cleanup_hook",
        )?;
    }
    Ok(el)
}

/// Env teardown (worker exit, process exit): drop this thread's calls still running (nobody can
/// see their results: a waiting acquire must not take the lock for a lease later), stop driving
/// from this thread and close the prepare handle before libuv's loop is closed.
unsafe extern "C" fn env_teardown(_arg: *mut c_void) {
    if let Some(el) = ENV_LOOP.with(|s| s.borrow_mut().take()) {
        el.gone.send_replace(true);
        el.uv_fd.borrow_mut().take(); // deregister libuv's fd from the reactor
        // SAFETY: the handle was initialized on this thread's loop and not closed yet.
        unsafe {
            uv_prepare_stop(el.prepare);
            uv_close(el.prepare, prepare_closed);
        }
    }
}

unsafe extern "C" fn prepare_closed(handle: *mut c_void) {
    // SAFETY: `handle` points one word into the boxed slice made in `env_loop`, whose first
    // word holds its length.
    unsafe {
        let base = handle.cast::<u64>().sub(1);
        let len = *base as usize;
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(base, len)));
    }
}

unsafe extern "C" fn tsfn_finalized(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the Arc leaked for this threadsafe function in `env_loop`.
    let slot = unsafe { Arc::from_raw(data as *const TsfnSlot) };
    slot.lock().unwrap_or_else(PoisonError::into_inner).take();
}

/// Runs before libuv polls for I/O: while calls of this thread are pending, drive the runtime
/// here until libuv has work (its fd readable) or its next timer is due; settle the calls that
/// complete meanwhile right here (in a callback scope, so their continuations run at once).
unsafe extern "C" fn on_prepare(_handle: *mut c_void) {
    let Some(el) = ENV_LOOP.with(|s| s.borrow().clone()) else { return };
    let Ok(d) = driver() else { return };
    while el.pending.get() > 0 {
        // SAFETY: the loop is this thread's, alive while its prepare handle runs.
        let (fd, timeout) = unsafe { (uv_backend_fd(el.uv), uv_backend_timeout(el.uv)) };
        // A JS timer due within a millisecond: let libuv sleep until it (tokio's timers would
        // overshoot it, see drive_until_work).
        if timeout == 0 || timeout == 1 || fd < 0 {
            return;
        }
        if !drive_until_work(&el, d, fd, timeout) {
            return;
        }
        let done = std::mem::take(&mut *el.done.borrow_mut());
        if done.is_empty() {
            return; // libuv has work, or its next timer is due
        }
        // SAFETY: JS thread, live env (its loop is running this callback).
        unsafe { settle_here(&el, done) };
    }
}

/// Drive the runtime until calls of this thread settle, libuv's fd turns readable or about
/// `timeout` ms pass (-1: no timer). False if libuv's fd cannot be watched.
fn drive_until_work(el: &EnvLoop, d: &'static Driver, fd: RawFd, timeout: c_int) -> bool {
    let mut slot = el.uv_fd.borrow_mut();
    if slot.is_none() {
        let _in = d.runtime().enter();
        // SAFETY: libuv's epoll fd stays open while this loop lives, and the registration is
        // dropped at env teardown (`env_teardown`), before libuv closes the loop.
        match unsafe { AsyncFd::register_with_interest(UvFd(fd), tokio::io::Interest::READABLE) } {
            Ok(a) => *slot = Some(a),
            Err(_) => return false,
        }
    }
    let Some(afd) = slot.as_ref() else { return false };
    d.drive(async {
        // One millisecond short of libuv's next timer: tokio's timers fire on the next
        // millisecond tick after their deadline, so a full `timeout` made every JS timer due
        // meanwhile late by up to 1 ms (a 1 ms `setTimeout` took 2.1 ms while calls were
        // pending). libuv sleeps the rest in its own poll.
        let timer = (timeout > 1).then(|| tokio::time::sleep(Duration::from_millis(timeout as u64 - 1)));
        let mut timer = std::pin::pin!(timer);
        std::future::poll_fn(|cx| {
            if !el.done.borrow().is_empty() {
                return Poll::Ready(());
            }
            *el.waker.borrow_mut() = Some(cx.waker().clone());
            loop {
                match afd.poll_read_ready(cx) {
                    Poll::Ready(Ok(mut g)) => {
                        if readable_now(fd) {
                            return Poll::Ready(());
                        }
                        g.clear_ready();
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => break,
                }
            }
            if let Some(t) = timer.as_mut().as_pin_mut()
                && t.poll(cx).is_ready()
            {
                return Poll::Ready(());
            }
            Poll::Pending
        })
        .await
    });
    el.waker.borrow_mut().take();
    true
}

/// Settle calls of this thread from `on_prepare`, inside a callback scope: closing it runs the
/// promise reactions (and `process.nextTick`s), as after any other callback into JS.
unsafe fn settle_here(el: &EnvLoop, done: Vec<Completion>) {
    let env = el.env;
    let (mut hs, mut cs, mut resource) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: JS thread, live env (caller contract); scopes closed in reverse order below.
    unsafe {
        let handle_scope = sys::napi_open_handle_scope(env, &mut hs) == sys::Status::napi_ok;
        let callback_scope = sys::napi_create_object(env, &mut resource) == sys::Status::napi_ok
            && sys::napi_open_callback_scope(env, resource, el.async_ctx, &mut cs) == sys::Status::napi_ok;
        for c in done {
            c(env);
            el.settled(env);
        }
        if callback_scope {
            sys::napi_close_callback_scope(env, cs);
        }
        if handle_scope {
            sys::napi_close_handle_scope(env, hs);
        }
    }
}

impl EnvLoop {
    /// One call of this thread settled (on the JS thread).
    fn settled(&self, env: sys::napi_env) {
        let left = self.pending.get().saturating_sub(1);
        self.pending.set(left);
        if left == 0 {
            // SAFETY: JS thread, live env, our threadsafe function.
            unsafe { sys::napi_unref_threadsafe_function(env, self.raw_tsfn) };
        }
    }
}

/// A settled call on its way to the JS thread.
type Completion = Box<dyn FnOnce(sys::napi_env) + Send>;

/// Threadsafe-function callback, on the JS thread: settle one promise.
unsafe extern "C" fn settle_on_js_thread(
    env: sys::napi_env,
    _cb: sys::napi_value,
    _ctx: *mut c_void,
    data: *mut c_void,
) {
    // SAFETY: `data` is a Box<Completion> made in `Settle::send`.
    let done = unsafe { Box::from_raw(data.cast::<Completion>()) };
    if env.is_null() {
        return; // torn down: drop it
    }
    let mut scope = std::ptr::null_mut();
    // SAFETY: on the JS thread with a live env (node's threadsafe-function dispatch).
    unsafe {
        let opened = sys::napi_open_handle_scope(env, &mut scope) == sys::Status::napi_ok;
        done(env);
        if opened {
            sys::napi_close_handle_scope(env, scope);
        }
    }
    if let Some(el) = ENV_LOOP.with(|s| s.borrow().clone())
        && el.env == env
    {
        el.settled(env);
    }
}

struct SendDeferred(sys::napi_deferred);
// SAFETY: the deferred is only used on the JS thread (in `settle_on_js_thread`); it merely
// travels through the runtime.
unsafe impl Send for SendDeferred {}

/// Settles one promise exactly once: with the call's reply, or (task dropped unfinished, e.g.
/// a panic) with an internal error.
struct Settle<T: ToNapiValue + Undelivered + Send + 'static> {
    /// The env the promise belongs to (compared, never dereferenced, off its thread).
    env: usize,
    tsfn: Arc<TsfnSlot>,
    deferred: Option<SendDeferred>,
    _t: std::marker::PhantomData<fn(T)>,
}

/// A reply inside a [`Completion`]: dropped without reaching JS (the thread was torn down), it
/// is handed to [`Undelivered`].
struct Delivery<T: Undelivered>(Option<Reply<T>>);

impl<T: Undelivered> Drop for Delivery<T> {
    fn drop(&mut self) {
        if let Some(Reply(Ok(v))) = self.0.take() {
            v.undelivered();
        }
    }
}

impl<T: ToNapiValue + Undelivered + Send + 'static> Settle<T> {
    fn send(&mut self, reply: Reply<T>) {
        let Some(d) = self.deferred.take() else { return };
        let mut delivery = Delivery(Some(reply));
        let done: Completion = Box::new(move |env| {
            let d = d;
            let reply = match delivery.0.take() {
                None => return,
                Some(Reply(Ok(v))) if v.outlived() => {
                    v.undelivered();
                    Reply::err(crate::client::closed())
                }
                Some(reply) => reply,
            };
            // SAFETY: on the JS thread with a live env (see settle_on_js_thread).
            unsafe {
                match Reply::to_napi_value(env, reply) {
                    Ok(v) => sys::napi_resolve_deferred(env, d.0, v),
                    Err(e) => sys::napi_reject_deferred(env, d.0, JsError::from(e).into_value(env)),
                };
            }
        });
        // On the promise's own JS thread (it is driving the runtime in `on_prepare`): hand it
        // over directly, no threadsafe function, no wake-up through libuv.
        if let Some(el) = ENV_LOOP.with(|s| s.borrow().clone())
            && el.env as usize == self.env
        {
            el.done.borrow_mut().push(done);
            if let Some(w) = el.waker.borrow_mut().take() {
                w.wake();
            }
            return;
        }
        let data = Box::into_raw(Box::new(done)).cast::<c_void>();
        let slot = self.tsfn.lock().unwrap_or_else(PoisonError::into_inner);
        let sent = match slot.as_ref() {
            // SAFETY: the slot holds the function until node finalizes it, and the lock keeps
            // the finalizer from running meanwhile.
            Some(f) => unsafe {
                sys::napi_call_threadsafe_function(f.0, data, sys::ThreadsafeFunctionCallMode::nonblocking)
                    == sys::Status::napi_ok
            },
            None => false,
        };
        drop(slot);
        if !sent {
            // SAFETY: not handed over: still ours.
            drop(unsafe { Box::from_raw(data.cast::<Completion>()) });
        }
    }
}

impl<T: ToNapiValue + Undelivered + Send + 'static> Drop for Settle<T> {
    fn drop(&mut self) {
        if self.deferred.is_some() {
            self.send(Reply::err(ferrolock::Error::new(
                ferrolock::ErrorKind::Internal,
                "a ferrolock task ended without a result",
            )));
        }
    }
}

/// Run `fut` on the runtime; a promise of its reply.
pub fn promise<'env, T, F>(env: &'env Env, fut: F) -> napi::Result<PromiseRaw<'env, Reply<T>>>
where
    T: ToNapiValue + Undelivered + Send + 'static,
    F: Future<Output = Reply<T>> + Send + 'static,
{
    // Boxed first: a call's future is 1-2 KB (an acquire was 3.7 KB before 07d8119), and every
    // move on its way into the task copied all of it (perf: memmove, 4 % of a W1 loop's samples).
    let fut = Box::pin(fut);
    let d = driver()?;
    let raw_env = env.raw();
    let el = env_loop(raw_env)?;
    let (mut deferred, mut promise) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: JS thread, live env.
    unsafe { check(sys::napi_create_promise(raw_env, &mut deferred, &mut promise), "napi_create_promise")? };
    if el.pending.get() == 0 {
        // SAFETY: JS thread, live env, our threadsafe function: pending calls keep the loop alive.
        unsafe {
            check(sys::napi_ref_threadsafe_function(raw_env, el.raw_tsfn), "napi_ref_threadsafe_function")?
        };
    }
    el.pending.set(el.pending.get() + 1);
    let mut settle = Settle::<T> {
        env: raw_env as usize,
        tsfn: el.tsfn.clone(),
        deferred: Some(SendDeferred(deferred)),
        _t: std::marker::PhantomData,
    };
    let mut gone = el.gone.subscribe();
    d.runtime().spawn(async move {
        tokio::select! {
            biased;
            reply = fut => settle.send(reply),
            // This thread was torn down: drop the call (an acquire in flight is undone by the
            // core, a waiting one just stops waiting, a release is finished in the background).
            _ = gone.wait_for(|gone| *gone) => {}
        }
    });
    Ok(PromiseRaw::new(raw_env, promise))
}
