//! The single-node lock: acquire (waiting by notification), re-entry, release, extend.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedMutexGuard, watch};

use crate::client::{Backend, Client, as_array, int_at, parse_num};
use crate::error::{Error, ErrorKind, Result};
use crate::hold::{Hold, LockState, LostCallback};
use crate::hot::{HotConn, Request};
use crate::keys::Keys;
use crate::options::LockOptions;
use crate::{scripts, timing, token};

/// A handle on one named lock with its own owner token. Clones share the token (and re-enter).
#[derive(Clone)]
pub struct Lock {
    pub(crate) inner: Arc<LockInner>,
}

pub(crate) struct LockInner {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) hold_key: Arc<[u8]>,
    pub(crate) token: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    /// Serialises this handle's round trips, so its count and cleanup never interleave.
    pub(crate) op: Arc<tokio::sync::Mutex<()>>,
    /// The current hold of this handle, if any.
    current: Mutex<Option<Arc<Hold>>>,
    /// Redlock: one lane per master, held by every request of this handle to that master until
    /// its reply (and any undo) is done, so a later request of this handle never overtakes an
    /// earlier one on the same master. Empty for a single-node client.
    pub(crate) lanes: Vec<crate::redlock::Lane>,
    /// Single node: where this handle's last request of unknown outcome went, so that the
    /// next ones follow it there (hot.rs).
    pub(crate) pin: crate::hot::HotPin,
    /// Single node: this handle's acquire (`EVALSHA`, not queued) and full release (`EVALSHA`
    /// to count 0), built once.
    pub(crate) acquire_request: OnceLock<Request>,
    release_request: OnceLock<Request>,
    /// The fence of the last hold whose full release failed after it was sent (0: none): it may
    /// have run, so a later call that finds the hold gone checks the fence counter, as a retry
    /// within the same call does ([`Lock::send_release_level`]).
    release_in_doubt: AtomicU64,
    /// Fair mode ([`LockOptions::fair`]).
    pub(crate) fair: bool,
    /// Fair mode: held by the acquire of this handle that may be queued (and by the undo of
    /// its place in the queue when it gives up), so one handle is queued once at a time.
    queue_turn: Arc<tokio::sync::Mutex<()>>,
}

impl LockInner {
    /// The fence of the last hold whose full release is in doubt (0: none).
    pub(crate) fn release_in_doubt(&self) -> u64 {
        self.release_in_doubt.load(Ordering::Relaxed)
    }
}

enum Attempt {
    Granted(Guard),
    Held {
        pttl: i64,
        /// When the try was sent: a fair grant announced after this reply happened later.
        t_send: Instant,
        /// Fair mode: the holder's fence (0 if not reported). A grant made after this try has a
        /// higher one; a grant message with a fence not above it was published before the try
        /// and reached this client late (an earlier grant to this handle's token).
        fence: u64,
    },
    /// Granted, but the validity was already used up: undone; try again.
    Expired,
}

/// What [`Lock::confirm_grant`] learned of a handed-on grant.
enum Confirmed {
    /// This token holds it; the lease was restarted and runs until then.
    Until(Instant),
    /// This token does not hold the lock (the grant was undone, or the lease ran out): try again.
    NotHeld,
    /// No answer: the caller keeps its own bound (from its last "held" try).
    Unknown,
}

impl Lock {
    pub(crate) fn new(client: Client, name: &[u8], opts: LockOptions) -> Result<Lock> {
        let keys = client.keys(name)?;
        let (ttl, renew) = opts.resolve(&client.inner.opts)?;
        let token: Arc<str> = token::new_token()?.into();
        let lanes = match &client.inner.backend {
            Backend::Single { .. } => Vec::new(),
            Backend::Quorum(q) => q.nodes.iter().map(|_| crate::redlock::Lane::default()).collect(),
        };
        if opts.fair && !lanes.is_empty() {
            return Err(Error::new(ErrorKind::InvalidConfig, "fair mode is not available with Redlock"));
        }
        if opts.fair && client.inner.opts.replica_acks.is_some() {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "fair mode does not combine with replica_acks (a handed-over grant is not acknowledged)",
            ));
        }
        Ok(Lock {
            inner: Arc::new(LockInner {
                hold_key: keys.hold.clone().into(),
                keys,
                client,
                token,
                ttl,
                renew,
                op: Arc::new(tokio::sync::Mutex::new(())),
                current: Mutex::new(None),
                lanes,
                pin: Default::default(),
                acquire_request: OnceLock::new(),
                release_request: OnceLock::new(),
                release_in_doubt: AtomicU64::new(0),
                fair: opts.fair,
                queue_turn: Arc::new(tokio::sync::Mutex::new(())),
            }),
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &[u8] {
        &self.inner.keys.name
    }

    /// The lease of each grant.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// Whether the client this lock was made from is closed ([`Client::close`]). A binding that
    /// hands a grant over later (on another thread, a later turn of an event loop) asks this
    /// when it does: a grant whose client was closed meanwhile is released, never delivered, as
    /// [`Lock::acquire`] does with one that returns after the close.
    pub fn is_closed(&self) -> bool {
        self.inner.client.is_closed()
    }

    /// Acquire, waiting at most `wait` (`None`: without bound). Fails with
    /// [`ErrorKind::AcquireTimeout`] when the wait elapses.
    ///
    /// Waiting is driven by release notifications, bounded by the holder's remaining lease:
    /// there is no fixed-interval polling.
    ///
    /// Redlock: each try is a quorum round; split votes retry after a random jitter, and when
    /// fewer than a quorum of masters answered the last try, the error is
    /// [`ErrorKind::QuorumNotReached`] instead.
    ///
    /// [`ErrorKind::Closed`] if the client is closed, also while this call waits
    /// ([`Client::close`]).
    pub async fn acquire(&self, wait: Option<Duration>) -> Result<Guard> {
        self.acquire_noting(wait, None).await
    }

    /// As [`Lock::acquire`], ended at once by `cancel` with [`ErrorKind::Cancelled`] (an attempt
    /// in flight is undone, as for any acquire that is dropped). If the attempts so far failed
    /// (a server that did not answer or could not be reached), the error quotes the last failure
    /// as an elapsed wait does (`the last attempt failed: TIMEOUT: …`), so that a caller whose
    /// own deadline cancels the wait (Go's `context`) can tell a server that did not answer from
    /// a lock that was held. (Redlock: a last round that did not reach a quorum is quoted as
    /// `QUORUM_NOT_REACHED: …`; a wait that elapses reports [`ErrorKind::QuorumNotReached`]
    /// itself.)
    pub async fn acquire_cancellable(
        &self,
        wait: Option<Duration>,
        cancel: impl Future<Output = ()>,
    ) -> Result<Guard> {
        let last = Mutex::new(None);
        tokio::select! {
            biased;
            () = cancel => Err(match last.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(e) => Error::new(
                    ErrorKind::Cancelled,
                    format!(
                        "the acquire was cancelled; the last attempt failed: {}: {}",
                        e.kind().name(),
                        e.message()
                    ),
                )
                .caused_by(e),
                None => Error::new(ErrorKind::Cancelled, "the acquire was cancelled"),
            }),
            r = self.acquire_noting(wait, Some(&last)) => r,
        }
    }

    /// [`Lock::acquire`], noting in `last` whether each attempt failed (and how).
    async fn acquire_noting(
        &self,
        wait: Option<Duration>,
        last: Option<&Mutex<Option<Error>>>,
    ) -> Result<Guard> {
        timing::check_wait(wait)?;
        let client = &self.inner.client;
        client.check_open()?;
        // The waits inside end at a close; a request in flight is not watched (that would cost
        // every uncontended acquire a registration): its reply settles it, see below.
        let r = self.acquire_open(wait, last).await;
        if client.is_closed() {
            return Err(self.undeliverable(r.ok()));
        }
        r
    }

    /// `f`, or [`ErrorKind::Closed`] as soon as the client is closed: for the waits of an
    /// acquire that may last (for the lock, a backoff, the fair queue's turn, a Redlock retry).
    /// Dropping `f` undoes what it started, as for any cancelled acquire.
    async fn or_closed<T>(&self, f: impl Future<Output = T>) -> Result<T> {
        tokio::select! {
            biased;
            () = self.inner.client.closing() => Err(crate::client::closed_error()),
            v = f => Ok(v),
        }
    }

    /// The error of an acquire that ended (with the grant `g`, or none: a request that timed
    /// out, another owner's hold) after the client was closed. Cut off by the close instead, the
    /// acquire future was dropped, which undoes an attempt in flight; a grant that came back
    /// after the close is released at once: the close marked its hold lost and nobody will
    /// receive it.
    fn undeliverable(&self, g: Option<Guard>) -> Error {
        if let Some(g) = g {
            Arc::new(g).release_detached();
        }
        crate::client::closed_error()
    }

    async fn acquire_open(
        &self,
        wait: Option<Duration>,
        last: Option<&Mutex<Option<Error>>>,
    ) -> Result<Guard> {
        let deadline = wait.map(|w| Instant::now() + w);
        let c = &self.inner.client;
        let (conn, notifier) = match &c.inner.backend {
            Backend::Single { conn, notifier } => (conn, notifier),
            Backend::Quorum(q) => {
                return self.or_closed(Box::pin(q.clone().acquire(self, deadline, last))).await?;
            }
        };
        // Fair mode: this handle queues once at a time; the undo of a queued acquire that gave
        // up comes first (a re-entry into a live hold needs no queue).
        let fair = self.inner.fair;
        let turn = match fair && self.live_count() == 0 {
            false => None,
            true => {
                let t = self.or_closed(self.inner.queue_turn.clone().lock_owned());
                Some(self.by_deadline(deadline, t).await??)
            }
        };
        let mut queued = Queued { lock: self.clone(), turn, armed: false };
        let mut t_held = None;
        let mut sub = notifier.peek(&self.inner.keys.channel);
        if let Some(s) = &sub {
            // Do not barge ahead of a waiter of this client that a release just woke (bounded:
            // this only orders tries, it never replaces one).
            let bound = c.inner.opts.response_timeout.min(Duration::from_millis(100));
            s.turn(deadline.map_or(bound, |d| bound.min(d.saturating_duration_since(Instant::now())))).await;
        }
        let mut backoff = Duration::from_millis(10);
        // Since when attempts keep failing (a server down, grants not replicated): said once, at
        // warning level, after a second, so that a long or unbounded wait is not silent.
        let mut failing_since: Option<(Instant, bool)> = None;
        'tries: loop {
            if fair && queued.turn.is_none() && self.live_count() == 0 {
                // A re-entry whose hold was found lost (or lost meanwhile) goes on as a fresh
                // acquire: it queues like one, with this handle's turn, or later waiters would
                // overtake it for the rest of this call.
                let t = self.or_closed(self.inner.queue_turn.clone().lock_owned());
                queued.turn = Some(self.by_deadline(deadline, t).await??);
            }
            if sub.is_none() {
                sub = notifier.peek(&self.inner.keys.channel);
            }
            if let Some(s) = sub.as_mut() {
                if fair {
                    s.set_token(self.inner.token.clone());
                }
                s.mark(); // a release after this point wakes us (or the next waiter in line)
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // Fair mode queues a waiter that subscribed and may still wait (docs/PROTOCOL.md),
            // with this handle's queue turn: not a re-entry, which took none (were its try to
            // find another owner, the queued token would stay behind when it gives up).
            let queue_ms = match (fair && sub.is_some() && queued.turn.is_some(), left) {
                (false, _) | (true, Some(Duration::ZERO)) => None,
                (true, None) => Some(u64::from(u32::MAX)),
                (true, Some(l)) => Some(timing::millis(l).max(1)),
            };
            // `Some`: this try failed in a way worth trying again (a server that cannot be
            // reached, a grant not replicated, a SUBSCRIBE lost with its connection).
            let failed = match self.attempt(queue_ms, deadline, last).await {
                Ok(Attempt::Granted(g)) => {
                    if let Some(s) = sub.as_mut() {
                        s.granted(); // the wake this waiter holds, if any, led to this grant
                    }
                    queued.armed = false; // a grant takes this token out of the queue
                    return Ok(g);
                }
                Ok(Attempt::Expired) => None,
                Ok(Attempt::Held { pttl, t_send, fence }) => 'held: {
                    if let Some(s) = sub.as_mut() {
                        s.held(); // the holder's release will wake the next waiter
                    }
                    if queue_ms.is_some() {
                        queued.armed = true;
                        t_held = Some((t_send, fence));
                    }
                    if left == Some(Duration::ZERO) {
                        queued.leave().await;
                        return Err(self.timed_out());
                    }
                    let Some(s) = sub.as_mut() else {
                        // Subscribe, then try again at once: a release between the first try
                        // and the subscription would otherwise go unnoticed.
                        // Bounded by the wait like every other step: a SUBSCRIBE that stalls
                        // (or queues behind other channels' subscriptions) ends at the deadline.
                        let redact = c.redactor();
                        let s = notifier.subscribe(conn, &self.inner.keys.channel, &redact);
                        match self.by_deadline(deadline, Box::pin(s)).await {
                            Ok(Ok(s)) => {
                                sub = Some(s);
                                continue 'tries;
                            }
                            Ok(Err(e)) if e.kind().is_transient() => break 'held Some(e),
                            Ok(Err(e)) | Err(e) => {
                                queued.leave().await;
                                return Err(e);
                            }
                        }
                    };
                    if fair && queued.turn.is_none() && self.live_count() == 0 {
                        continue 'tries; // a re-entry that lost its hold: try again, queued
                    }
                    // The holder's lease bounds the wait even if a message is lost.
                    let mut bound = match u64::try_from(pttl) {
                        Ok(ms) => Duration::from_millis(ms + 1),
                        Err(_) => Duration::from_secs(1),
                    };
                    if let Some(l) = left {
                        bound = bound.min(l);
                    }
                    self.or_closed(s.wait(bound)).await?;
                    // Fair mode: a release handed the lock to this token after the last "held"
                    // reply, so its lease began after `t_held`: no round trip needed. Unless the
                    // message's fence is not above that reply's holder's: then it announced an
                    // earlier grant to this token (since released, and the lock passed on) and
                    // only reached this client now, over the subscriber connection.
                    if let Some(fence) = s.take_grant()
                        && let Some((t, holder)) = t_held
                        && fence > holder
                    {
                        // Within the wait (the grant is released by the queue's leave otherwise).
                        let _op = self.op_until(deadline).await?;
                        let ttl = self.inner.ttl;
                        // The hand-over gave this token the lease of its queue entry: an offer
                        // shorter than its own lease, which only a confirmation (an owner-checked
                        // extend) turns into that lease (docs/PROTOCOL.md, "Taking a handed-on
                        // grant"). Until then the hold's deadline is the offer's.
                        let offer = timing::grant_offer(ttl);
                        let mut deadline = timing::deadline(&c.inner.opts, t, offer);
                        // An offer with most of it left is taken now and confirmed by the
                        // watchdog right after (`Watchdog::confirm`), off the hand-over's path.
                        let confirm_later = offer < ttl && deadline >= Instant::now() + offer / 2;
                        if !confirm_later
                            && (offer < ttl || deadline < Instant::now() + ttl * 2 / 3)
                            && self.live_count() == 0
                        {
                            // An offer mostly used up, or queued long since the last "held" try
                            // (that bound leaves less than the watchdog's first renewal needs):
                            // restart the lease before taking the grant.
                            match self.confirm_grant(conn).await {
                                Confirmed::Until(d) => deadline = d,
                                Confirmed::NotHeld => break 'held None, // try again
                                // The offer's bound is too short to hand out: the next try
                                // finds this token holding (and settles the count) or not.
                                Confirmed::Unknown if offer < ttl => break 'held None,
                                Confirmed::Unknown => {}
                            }
                        }
                        if deadline > Instant::now() && self.live_count() == 0 {
                            s.granted();
                            queued.armed = false;
                            let g = self.granted(fence, 1, deadline);
                            if confirm_later {
                                c.inner.watchdog.confirm(&g.hold);
                            }
                            return Ok(g);
                        }
                        // Validity used up while queued (or a hold appeared meanwhile): the
                        // next try finds this token holding and settles the count.
                    }
                    None
                }
                Err(e) if e.kind().is_transient() && left != Some(Duration::ZERO) => Some(e),
                Err(e) => return Err(e),
            };
            if let Some(last) = last {
                *last.lock().unwrap_or_else(|p| p.into_inner()) = failed.clone();
            }
            if let Some(e) = failed {
                tracing::debug!("ferrolock: acquire retry after {}", e.kind());
                let (since, told) = failing_since.get_or_insert((Instant::now(), false));
                if !*told && since.elapsed() >= Duration::from_secs(1) {
                    *told = true;
                    tracing::warn!(
                        "ferrolock: acquiring lock {:?} keeps failing ({e}); retrying until the wait ends",
                        String::from_utf8_lossy(&self.inner.keys.name)
                    );
                }
                self.or_closed(tokio::time::sleep(left.map_or(backoff, |l| l.min(backoff)))).await?;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    // Quote the failure: a wait that ends on a server that cannot be
                    // reached (or a grant that was not replicated) is not "the lock was held".
                    queued.leave().await;
                    return Err(self.timed_out_failing(&e));
                }
                continue;
            }
            failing_since = None;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // One last try happens above only if time remains; report the timeout.
                queued.leave().await;
                return Err(self.timed_out());
            }
        }
    }

    /// One attempt: `Ok(None)` when another owner holds the lock (Redlock: or a vote was split;
    /// [`ErrorKind::QuorumNotReached`] when fewer than a quorum of masters answered).
    /// [`ErrorKind::Closed`] if the client is closed.
    pub async fn try_acquire(&self) -> Result<Option<Guard>> {
        let client = &self.inner.client;
        client.check_open()?;
        // One try: like a request in flight in `acquire`, its reply settles it. Whatever it
        // brought (a grant, a request that timed out), a closed client answers CLOSED.
        let r = self.try_acquire_open().await;
        if client.is_closed() {
            return Err(self.undeliverable(r.ok().flatten()));
        }
        r
    }

    async fn try_acquire_open(&self) -> Result<Option<Guard>> {
        if let Backend::Quorum(q) = &self.inner.client.inner.backend {
            loop {
                return match q.clone().attempt(self, None).await? {
                    crate::redlock::Round::Granted(g) => Ok(Some(g)),
                    crate::redlock::Round::Unreachable(e) => Err(e),
                    // The old hold was lost; this attempt was a re-entry: try once afresh.
                    crate::redlock::Round::Superseded => continue,
                    _ => Ok(None),
                };
            }
        }
        match self.attempt(None, None, None).await? {
            Attempt::Granted(g) => Ok(Some(g)),
            Attempt::Held { .. } | Attempt::Expired => Ok(None),
        }
    }

    /// Fair mode: restart the lease of a handed-on grant (owner-checked `extend`).
    async fn confirm_grant(&self, conn: &crate::client::Conn) -> Confirmed {
        if HotConn::settle_pin(self.inner.client.inner.hot.as_ref(), conn, &self.inner.pin).await.is_err() {
            return Confirmed::Unknown;
        }
        let t_send = Instant::now();
        let r: redis::RedisResult<i64> = scripts::EXTEND
            .key(&self.inner.keys.hold)
            .arg(&*self.inner.token)
            .arg(timing::millis(self.inner.ttl))
            .invoke_async(&mut conn.clone())
            .await;
        match r {
            Ok(1) => {
                Confirmed::Until(timing::deadline(&self.inner.client.inner.opts, t_send, self.inner.ttl))
            }
            Ok(_) => Confirmed::NotHeld,
            Err(_) => Confirmed::Unknown,
        }
    }

    pub(crate) fn timed_out(&self) -> Error {
        Error::new(ErrorKind::AcquireTimeout, "the wait elapsed before the lock was free")
    }

    /// The timeout of a wait whose latest attempt failed with `cause` (retried until the wait
    /// ran out): the message says so, the kind stays [`ErrorKind::AcquireTimeout`].
    pub(crate) fn timed_out_failing(&self, cause: &Error) -> Error {
        Error::new(
            ErrorKind::AcquireTimeout,
            format!(
                "the wait elapsed; the last attempt failed: {}: {}",
                cause.kind().name(),
                cause.message()
            ),
        )
        .caused_by(cause.clone())
    }

    pub(crate) fn current(&self) -> Option<Arc<Hold>> {
        self.inner.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set_current(&self, hold: Option<Arc<Hold>>) {
        *self.inner.current.lock().unwrap_or_else(|p| p.into_inner()) = hold;
    }

    /// Give up a hold found lost: stop renewing it, mark it lost with `why` (quoted by a later
    /// release or `on_lost`), and forget it as this handle's current hold.
    pub(crate) fn give_up(&self, hold: &Arc<Hold>, why: &str) {
        self.inner.client.inner.watchdog.unregister(hold);
        hold.mark_lost(why);
        let mut cur = self.inner.current.lock().unwrap_or_else(|p| p.into_inner());
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, hold)) {
            *cur = None;
        }
    }

    /// The count this handle holds on the server (0 when it holds nothing live).
    pub(crate) fn live_count(&self) -> u32 {
        self.current().filter(|h| !h.is_final()).map_or(0, |h| h.live_levels())
    }

    /// What an undo leaves behind: the live count and the fence of the hold it belongs to.
    fn live_level(&self) -> Level {
        match self.current().filter(|h| !h.is_final()) {
            Some(h) => Level { count: h.live_levels(), fence: Some(h.fence) },
            None => Level { count: 0, fence: None },
        }
    }

    /// `f`, given up with [`ErrorKind::AcquireTimeout`] at `deadline` (the end of a wait).
    async fn by_deadline<T>(&self, deadline: Option<Instant>, f: impl Future<Output = T>) -> Result<T> {
        match deadline {
            None => Ok(f.await),
            Some(d) => tokio::time::timeout_at(d.into(), f).await.map_err(|_| self.timed_out()),
        }
    }

    /// This handle's op lock for an attempt of a wait that ends at `deadline`: a round trip of
    /// this handle still under way (a background undo, a release on another task) is waited for
    /// no longer than the wait itself, so a bounded acquire ends by its deadline.
    pub(crate) async fn op_until(&self, deadline: Option<Instant>) -> Result<OwnedMutexGuard<()>> {
        match self.inner.op.clone().try_lock_owned() {
            Ok(op) => Ok(op),
            Err(_) => self.by_deadline(deadline, self.inner.op.clone().lock_owned()).await,
        }
    }

    /// One acquire script call; `queue_ms` (fair mode): join the queue for that long if held.
    /// A failed call is noted in `last` before its undo is sent, so that a wait cancelled during
    /// the undo (up to two response timeouts against a server that stopped answering) quotes it.
    async fn attempt(
        &self,
        queue_ms: Option<u64>,
        deadline: Option<Instant>,
        last: Option<&Mutex<Option<Error>>>,
    ) -> Result<Attempt> {
        let inner = &self.inner;
        let c = &inner.client.inner;
        let Backend::Single { conn, .. } = &c.backend else {
            return Err(Error::new(ErrorKind::Internal, "single-node attempt on a Redlock client"));
        };
        let op = self.op_until(deadline).await?;
        let prior = self.live_level();
        // If this future is dropped mid-flight, or the outcome is unknown, undo whatever the
        // script may have done with this token.
        let mut pending = Pending { lock: Some((self.clone(), op)), prior };
        // A re-entry sets the lease to this lock's length (`Watchdog::lease_change`).
        let mut lease = inner.ttl;
        let mut _still = None;
        if prior.count > 0
            && let Some(h) = self.current()
        {
            let (still, l) = c.watchdog.lease_change(&h, inner.ttl, &c.opts).await;
            (_still, lease) = (Some(still), l);
        }
        let note = |e: &Error| {
            if let Some(last) = last
                && e.kind().is_transient()
            {
                *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
            }
        };
        let t_send = Instant::now();
        // With replica_acks, the script and its WAIT go out as one pipeline (replicas.rs).
        let acquired = crate::replicas::acquire(inner, conn, queue_ms).await;
        let acquired = match acquired {
            Ok(a) => a,
            Err(e) => {
                let err = inner.client.error(&e);
                note(&err);
                // Nothing to undo after a refused connection: the request never went out.
                if err.kind().is_transient() && !conn.never_sent(&e) {
                    if inner.client.is_closed() {
                        // This acquire ends with CLOSED: nothing follows that the undo must
                        // come before, so it does not wait for it (GUARANTEES, "Closing a client").
                        pending.spawn();
                    } else {
                        Box::pin(pending.settle()).await;
                    }
                } else {
                    pending.disarm();
                }
                return Err(err);
            }
        };
        if let Err(e) = crate::replicas::confirm_grant(&inner.client, &acquired) {
            note(&e);
            if crate::replicas::undo_refused_grants() {
                Box::pin(pending.settle()).await; // too few replicas acknowledged: undo the grant
            } else {
                pending.disarm(); // a test's control only (replicas::keep_refused_grants_for_tests)
            }
            return Err(e);
        }
        let _op = pending.disarm();
        let items = as_array(&acquired.reply)?;
        match int_at(items, 0)? {
            0 => {
                let fence = match items.get(2) {
                    Some(redis::Value::Nil) | None => 0,
                    Some(_) => parse_num(items, 2)?,
                };
                if prior.count > 0
                    && let Some(h) = self.current().filter(|h| Some(h.fence) == prior.fence)
                {
                    // A re-entry found another owner: this handle's hold is gone (force-unlocked,
                    // or its lease ran out unrenewed). Say so now, not at the next renewal.
                    self.give_up(&h, "a re-entry found the lock held by another owner");
                }
                Ok(Attempt::Held { pttl: int_at(items, 1)?, t_send, fence })
            }
            2 => Err(Error::new(
                ErrorKind::ReentrancyLimit,
                format!("re-entry refused: depth {} is the limit", c.opts.max_reentrancy),
            )),
            1 => {
                let fence: u64 = parse_num(items, 1)?;
                let mut count: u32 = parse_num(items, 2)?;
                let deadline = timing::deadline(&c.opts, t_send, lease);
                if deadline <= Instant::now() {
                    // Never hand out a grant whose validity is already used up.
                    let _ = Box::pin(self.send_release_level(prior)).await;
                    return Ok(Attempt::Expired);
                }
                // The levels this handle holds now: its live ones plus this grant.
                let expected = if prior.fence == Some(fence) { prior.count + 1 } else { 1 };
                if count > expected {
                    // More levels than that: a re-entry into a hold of this token that no live
                    // guard counts (left by an undo that never reached the server), or the script
                    // ran twice (the cluster driver resends a request whose connection was lost).
                    // The extra levels belong to nobody: bring the hold down to what this handle
                    // holds, or no release would ever free it.
                    let _ = Box::pin(self.send_release_level(Level { count: expected, fence: Some(fence) }))
                        .await;
                    count = expected;
                }
                Ok(Attempt::Granted(self.granted(fence, count, deadline)))
            }
            _ => Err(Error::new(ErrorKind::Protocol, "unknown acquire status")),
        }
    }

    pub(crate) fn granted(&self, fence: u64, count: u32, deadline: Instant) -> Guard {
        let inner = &self.inner;
        let c = &inner.client.inner;
        let hold = match self.current() {
            Some(h) if count > 1 && h.fence == fence && !h.is_final() => {
                h.set_count(count);
                h.leased(deadline, inner.ttl);
                c.watchdog.leased(&h);
                h
            }
            old => {
                if let Some(old) = old {
                    self.give_up(&old, "superseded by a new grant to the same handle");
                }
                let h =
                    Arc::new(Hold::new(fence, count, deadline, inner.ttl, inner.renew, c.runtime.clone()));
                self.set_current(Some(h.clone()));
                h
            }
        };
        hold.add_guard();
        if !hold.has_watchdog() {
            c.watchdog.register(&hold, self);
        }
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        let flags = Flags {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            released: AtomicBool::new(false),
            done: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            unseen: Mutex::new(None),
            released_now: tokio::sync::Notify::new(),
        };
        Guard { lock: self.clone(), hold, flags: Arc::new(flags) }
    }

    /// Set this token's count on the server to `target` (0 deletes and publishes). Idempotent.
    /// Returns the remaining count, or -1 when this token does not hold the lock.
    pub(crate) async fn send_release(&self, target: u32) -> Result<i64> {
        self.send_release_level(Level { count: target, fence: None }).await
    }

    /// [`Self::send_release`] to `level.count`, where a hold of this token with another fence
    /// than `level.fence` (a later grant whose reply was lost) is deleted instead.
    async fn send_release_level(&self, level: Level) -> Result<i64> {
        let target = level.count;
        let inner = &self.inner;
        let c = &inner.client;
        let (conn, notifier) = match &c.inner.backend {
            Backend::Single { conn, notifier } => (conn, notifier),
            Backend::Quorum(q) => return Box::pin(q.clone().release(self, target, level.fence)).await,
            // (Redlock's undo has its own per-master rules: docs/REDLOCK.md.)
        };
        let before = if target == 0 { notifier.releasing(&inner.keys.channel) } else { None };
        let mut last = None;
        let command = |verb: &str| {
            let mut cmd = redis::cmd(verb);
            if verb == "EVAL" {
                cmd.arg(scripts::RELEASE_SOURCE);
            } else {
                cmd.arg(scripts::RELEASE.get_hash());
            }
            let k = &inner.keys;
            if inner.fair {
                cmd.arg(4).arg(&k.hold).arg(&k.fence).arg(&k.queue).arg(&k.waiters);
            } else {
                cmd.arg(1).arg(&k.hold);
            }
            cmd.arg(&*inner.token).arg(&k.channel).arg(target);
            if let Some(fence) = level.fence.filter(|_| target > 0) {
                cmd.arg(fence.to_string());
            } else if conn.sharded() || inner.fair {
                cmd.arg(""); // no fence; ARGV[5] follows
            }
            if conn.sharded() {
                cmd.arg("sharded"); // SPUBLISH on a cluster (docs/PROTOCOL.md)
            } else if inner.fair {
                cmd.arg("");
            }
            if inner.fair {
                cmd.arg(timing::millis(c.inner.opts.fence_retention));
            }
            cmd
        };
        let waited_on = c.waited_on(&inner.keys.channel);
        // An earlier try (of this call, or of an earlier call for this hold) may have run
        // although its reply was lost.
        let mut unknown = level.fence.is_some_and(|f| inner.release_in_doubt.load(Ordering::Relaxed) == f);
        for attempt in 0..2 {
            // The retry carries the script itself: the first try's reply may have been a
            // NOSCRIPT that nobody saw (a stopped or restarted server answers in order once it
            // runs again), so nobody followed it with SCRIPT LOAD.
            let verb = if attempt == 0 { "EVALSHA" } else { "EVAL" };
            let built;
            let req = if verb == "EVALSHA" && target == 0 {
                inner.release_request.get_or_init(|| Request::new(command(verb)))
            } else {
                built = Request::new(command(verb));
                &built
            };
            let hot = c.inner.hot.as_ref();
            // Pinned here, so that `after_first_poll` holds a reference and no second copy.
            let query = std::pin::pin!(HotConn::query(hot, conn, &inner.pin, req, waited_on));
            let mut hand_on = None;
            // A full release while handles of this client wait (default mode, single server):
            // once the request is queued (its first poll), wake the next waiter at once, so its
            // try follows the release on the wire instead of a round trip after the release's
            // message (notify.rs, "Hand-on").
            // (One path for both: two would keep two copies of the query in this future.)
            let hand_on_from = before.filter(|_| attempt == 0 && waited_on && !inner.fair && !conn.sharded());
            let r = after_first_poll(query, || {
                if let Some(before) = hand_on_from {
                    hand_on = notifier.hand_on(&inner.keys.channel, before);
                }
            })
            .await;
            let mut r = r.and_then(|v| redis::from_redis_value::<i64>(v).map_err(Into::into));
            if let Some(h) = hand_on.take() {
                // The request the early wake followed: did it delete the hold? (Not a retry of
                // it: the woken waiter's try may have run before that.)
                h.settle(matches!(r, Ok(0)));
            }
            if matches!(r, Ok(n) if n < 0) && target == 0 {
                // Pinned behind an earlier try of this release whose reply was lost: if that try
                // deleted the hold, this one finds it gone, and the earlier reply says so.
                if matches!(inner.pin.late_reply(), Some(redis::Value::Int(0))) {
                    r = Ok(0);
                } else if unknown
                    && let Some(fence) = level.fence
                    && Box::pin(no_grant_since(&mut conn.clone(), &inner.keys.fence, fence)).await
                {
                    // The multiplexed connection drops late replies: the earlier try most
                    // likely deleted the hold. Nobody was granted the lock since this hold's
                    // grant either way, so no other owner overlapped it: not a loss.
                    r = Ok(0);
                }
            }
            if attempt == 0 && r.as_ref().is_err_and(scripts::is_noscript) {
                continue;
            }
            match r {
                Ok(n) => {
                    if n == 0
                        && let Some(before) = before
                    {
                        notifier.released(&inner.keys.channel, before);
                    }
                    return Ok(n);
                }
                Err(e) => {
                    let err = c.error(&e);
                    // A refused connection: the server is down now, and the connection has
                    // just spent its reconnect burst (a retry would only wait out another).
                    if !err.kind().is_transient() || conn.never_sent(&e) {
                        return Err(err);
                    }
                    last = Some(err); // the reply was lost, not the request: retry is safe
                    unknown = true;
                    if target == 0
                        && let Some(f) = level.fence
                    {
                        inner.release_in_doubt.store(f, Ordering::Relaxed);
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::new(ErrorKind::Internal, "release loop")))
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &String::from_utf8_lossy(&self.inner.keys.name))
            .field("ttl", &self.inner.ttl)
            .field("renew", &self.inner.renew)
            .finish_non_exhaustive()
    }
}

/// Runs `fut`; `then` runs once, right after its first poll if that poll did not finish it.
async fn after_first_poll<T>(fut: impl std::future::Future<Output = T>, then: impl FnOnce()) -> T {
    let mut fut = std::pin::pin!(fut);
    let mut then = Some(then);
    std::future::poll_fn(|cx| {
        let p = fut.as_mut().poll(cx);
        if p.is_pending()
            && let Some(f) = then.take()
        {
            f();
        }
        p
    })
    .await
}

/// Whether the fence counter `key` (on one server) still holds `fence`: no grant of the lock
/// there since the one that gave it (every grant raises the counter). False when it cannot tell
/// (no reply, or the counter idled out).
pub(crate) async fn no_grant_since<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    key: &[u8],
    fence: u64,
) -> bool {
    let r: redis::RedisResult<Option<u64>> = redis::cmd("GET").arg(key).query_async(conn).await;
    matches!(r, Ok(Some(f)) if f == fence)
}

/// A handle's level on the server: its reentrancy count and the fence of that hold.
#[derive(Clone, Copy, Debug)]
struct Level {
    count: u32,
    fence: Option<u64>,
}

/// Fair mode: the place in the server's queue of an acquire that may have joined it. Armed
/// from a "held" reply that queued this token until the acquire returns a grant; an acquire
/// that gives up otherwise leaves the queue (and hands on a grant made to it meanwhile), and
/// keeps this handle's queue turn until that is done.
struct Queued {
    lock: Lock,
    turn: Option<OwnedMutexGuard<()>>,
    armed: bool,
}

impl Queued {
    /// Leaving the queue as a task of its own, holding this handle's queue turn (its next
    /// acquire waits for it); `None` if not queued.
    fn spawn_leave(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        if !std::mem::take(&mut self.armed) {
            return None;
        }
        let (lock, turn) = (self.lock.clone(), self.turn.take());
        let rt = lock.inner.client.inner.runtime.clone();
        Some(rt.spawn(async move {
            let _turn = turn;
            lock.leave_queue().await;
        }))
    }

    /// Leave the queue and wait until it is done. A caller that stops waiting does not cut it
    /// short (see [`Pending::settle`]): a grant made to this token meanwhile would stay held.
    async fn leave(&mut self) {
        if let Some(leaving) = self.spawn_leave() {
            let _ = leaving.await;
        }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.spawn_leave();
    }
}

impl Lock {
    /// Fair mode: leave the queue; a grant made to this token meanwhile (which this handle never
    /// took) is released and handed on by the same script.
    async fn leave_queue(&self) {
        let _op = self.inner.op.clone().lock_owned().await;
        if self.live_count() == 0 {
            let _ = self.send_release_level(Level { count: 0, fence: None }).await;
        }
    }
}

/// Undo of an acquire whose outcome is unknown (timeout, dropped connection, cancellation).
struct Pending {
    lock: Option<(Lock, OwnedMutexGuard<()>)>,
    prior: Level,
}

impl Pending {
    fn disarm(&mut self) -> Option<OwnedMutexGuard<()>> {
        self.lock.take().map(|(_, op)| op)
    }

    /// The undo as a task of its own, holding the handle's op lock (later calls on this handle
    /// wait for it); `None` once disarmed or already sent.
    fn spawn(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        let (lock, op) = self.lock.take()?;
        let prior = self.prior;
        let rt = lock.inner.client.inner.runtime.clone();
        Some(rt.spawn(async move {
            let _op = op;
            let _ = lock.send_release_level(prior).await;
        }))
    }

    /// Send the undo and wait for it. A caller that stops waiting (a timeout around the acquire)
    /// does not cut it short: between its `EVALSHA` and the `EVAL` that follows a `NOSCRIPT`, that
    /// would leave the grant held for its lease.
    async fn settle(&mut self) {
        if let Some(undo) = self.spawn() {
            let _ = undo.await;
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.spawn();
    }
}

/// Proof of one level of hold. Release it explicitly; dropping it only stops the watchdog
/// (when it was the last live guard of its hold) and lets the lease run out. A dropped guard's
/// level is given up: the next release of the hold counts only the guards still live.
pub struct Guard {
    lock: Lock,
    hold: Arc<Hold>,
    flags: Arc<Flags>,
}

/// A guard's release progress (shared with a release finished in the background).
struct Flags {
    /// Unique per guard level: the key of its loss callbacks ([`Hold::on_lost`]).
    id: usize,
    /// Set while a release is in flight and after it (reset by a transient failure).
    released: AtomicBool,
    /// This level was released: the guard reports `Released` from then on, even while other
    /// levels of the same hold stay live or after the hold is lost.
    done: AtomicBool,
    /// The guard was dropped (a release finishing in the background gives its level up then).
    dropped: AtomicBool,
    /// The level was given up ([`Guard::gone`] ran for it: once, whoever comes first).
    gone: AtomicBool,
    /// The outcome of a release whose caller stopped (or may stop) waiting for it, for the next
    /// release to report ([`ReleaseRest`], [`Guard::release_spawned`]).
    unseen: Mutex<Option<Outcome>>,
    /// Woken when `done` is set ([`Guard::ended`]).
    released_now: tokio::sync::Notify,
}

/// A release's outcome once it is known.
type Outcome = watch::Receiver<Option<Result<()>>>;

/// Wait for a release's outcome.
async fn outcome(rx: &mut Outcome) -> Result<()> {
    match rx.wait_for(Option::is_some).await {
        Ok(r) => r.clone().unwrap_or(Ok(())),
        // Its task was dropped unfinished: the runtime is shutting down with the client.
        Err(_) => Err(Error::new(ErrorKind::Closed, "the client was closed during the release")),
    }
}

impl Flags {
    fn unseen_slot(&self) -> std::sync::MutexGuard<'_, Option<Outcome>> {
        self.unseen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forget the outcome `rx` waits for, once it was reported (unless another took its place).
    fn seen(&self, rx: &Outcome) {
        let mut slot = self.unseen_slot();
        if slot.as_ref().is_some_and(|s| s.same_channel(rx)) {
            *slot = None;
        }
    }

    /// Give this level up, once (see [`Guard::gone`]).
    fn give_up(&self, lock: &Lock, hold: &Hold) {
        if !self.gone.swap(true, Ordering::AcqRel) {
            Guard::gone(lock, hold);
        }
    }

    /// Record a release's outcome: a transient failure leaves the level held, so that the call
    /// can be retried (or, once the guard is dropped, gives it up to its lease).
    fn settle(&self, lock: &Lock, hold: &Hold, r: &Result<()>) {
        match r {
            Err(e) if e.kind().is_transient() => {
                // SeqCst with `Guard::drop`: one of the two sees the other's store.
                self.released.store(false, Ordering::SeqCst);
                if self.dropped.load(Ordering::SeqCst) {
                    self.give_up(lock, hold);
                }
            }
            Ok(()) => {
                self.done.store(true, Ordering::Release);
                self.released_now.notify_waiters();
                hold.forget_lost(self.id);
                self.give_up(lock, hold);
            }
            Err(_) => self.give_up(lock, hold),
        }
    }
}

/// The rest of a release whose caller stopped waiting for it (its future was dropped before the
/// reply was handled): sent again in the background (the count it sends is absolute, so a second
/// send is harmless), and its outcome kept for the guard's next release, which waits for it and
/// reports it (a caller that retries after its timeout learns that the release went through,
/// rather than being told the guard was already released). A transient failure leaves the level
/// held, as for any release: that next release sends it again; until then the watchdog renews
/// the hold once more, and a guard dropped meanwhile leaves the lock to its lease.
struct ReleaseRest(Option<(Lock, Arc<Hold>, Arc<Flags>)>);

impl Drop for ReleaseRest {
    fn drop(&mut self) {
        if let Some((lock, hold, flags)) = self.0.take() {
            let (tx, rx) = watch::channel(None);
            *flags.unseen_slot() = Some(rx);
            let rt = lock.inner.client.inner.runtime.clone();
            rt.spawn(async move {
                let r = Guard::release_level(&lock, &hold).await;
                flags.settle(&lock, &hold, &r);
                tx.send_replace(Some(r));
            });
        }
    }
}

impl Guard {
    /// The fencing token of this hold: strictly increasing across grants of the lock name;
    /// re-entry and renewal keep it.
    pub fn fence(&self) -> u64 {
        self.hold.fence
    }

    /// The reentrancy depth of this handle's hold (zero once this level is released or the
    /// hold is lost).
    pub fn count(&self) -> u32 {
        if self.is_done() || self.hold.is_final() { 0 } else { self.hold.live_levels() }
    }

    /// Time left until the local deadline (zero once lost or this level released).
    pub fn remaining(&self) -> Duration {
        if self.is_done() { Duration::ZERO } else { self.hold.remaining() }
    }

    fn is_done(&self) -> bool {
        self.flags.done.load(Ordering::Acquire)
    }

    /// The error of a call on a guard whose release was already made: `NotHeld`, unless that
    /// release found the hold lost (a stale guard keeps reporting `Lost`, docs/GUARANTEES.md).
    fn already_released(&self) -> Error {
        if !self.is_done() && self.hold.state() == LockState::Lost {
            return Error::new(ErrorKind::Lost, "the lock was lost before release");
        }
        Error::new(ErrorKind::NotHeld, "this guard was already released")
    }

    /// `Ok` if still held with at least `margin` of validity left; [`ErrorKind::Lost`] otherwise.
    pub fn ensure(&self, margin: Duration) -> Result<()> {
        match self.state() {
            LockState::Released => Err(Error::new(ErrorKind::NotHeld, "the lock was released")),
            LockState::Lost => Err(self.lost_error()),
            _ if self.remaining() <= margin => {
                Err(Error::new(ErrorKind::Lost, "less validity left than the required margin"))
            }
            _ => Ok(()),
        }
    }

    /// LOST, naming why the hold was lost when that was recorded (a refused renewal, the
    /// client's close, a forced unlock seen by an extend), as a loss callback hears it.
    fn lost_error(&self) -> Error {
        match self.hold.lost_reason() {
            Some(why) => Error::new(ErrorKind::Lost, format!("the lock was lost: {why}")),
            None => Error::new(ErrorKind::Lost, "the lock was lost"),
        }
    }

    /// The hold's state; `Released` once this guard's level is released, also while other
    /// levels of the hold stay live.
    pub fn state(&self) -> LockState {
        if self.is_done() { LockState::Released } else { self.hold.state() }
    }

    /// Whether the hold is lost.
    pub fn is_lost(&self) -> bool {
        self.state() == LockState::Lost
    }

    /// Resolves when the hold is lost (never, if it is released first).
    pub async fn lost(&self) {
        let mut rx = self.hold.subscribe();
        loop {
            if self.is_done() {
                std::future::pending::<()>().await;
            }
            if self.hold.state() == LockState::Lost {
                return;
            }
            if *rx.borrow_and_update() == LockState::Released {
                std::future::pending::<()>().await;
            }
            let deadline = self.hold.deadline();
            tokio::select! {
                r = rx.changed() => if r.is_err() { std::future::pending::<()>().await },
                _ = tokio::time::sleep_until(deadline.into()) => {}
            }
        }
    }

    /// Resolves when this guard's level ends: [`LockState::Lost`] once the hold is lost while
    /// the level is held, [`LockState::Released`] once the level is released (at once if it
    /// already is). Unlike [`Guard::lost`], a wait for the loss that a release (on another task
    /// or thread) ends at once rather than never.
    pub async fn ended(&self) -> LockState {
        let released = self.flags.released_now.notified();
        tokio::pin!(released);
        // Registered before `done` is read: a release in between still wakes it.
        released.as_mut().enable();
        if self.is_done() {
            return LockState::Released;
        }
        tokio::select! {
            () = self.lost() => LockState::Lost,
            () = released => LockState::Released,
        }
    }

    /// Every state change of this hold.
    pub fn watch(&self) -> watch::Receiver<LockState> {
        self.hold.subscribe()
    }

    /// Call `cb` once if the hold is lost (at once if it already is; never once this guard's
    /// level is released). Runs on a blocking-pool thread; it may call back into ferrolock.
    /// The hold keeps `cb` until it ends: a `cb` that owns this guard (an `Arc<Guard>` moved
    /// into it) is a cycle, and a guard never dropped is renewed for as long as its `Lock` lives.
    /// Move a `Weak` into it instead.
    pub fn on_lost(&self, cb: impl FnOnce(Error) + Send + 'static) {
        if self.is_done() {
            return; // released: never lost
        }
        let cb: LostCallback = Box::new(cb);
        self.hold.on_lost(self.owner_key(), cb);
        if self.is_done() {
            self.hold.forget_lost(self.owner_key()); // released meanwhile
        }
    }

    /// This guard level's key for its loss callbacks.
    fn owner_key(&self) -> usize {
        self.flags.id
    }

    /// Release this level in the background, on the client's runtime, for a grant nobody will
    /// receive (its caller was cancelled as it arrived, or the caller's thread is gone). Never
    /// fails; if the release does, the lease runs out.
    pub fn release_detached(self: Arc<Self>) {
        let rt = self.lock.inner.client.inner.runtime.clone();
        let unseen = self.unseen();
        rt.spawn(async move {
            let _ = self.release_open(unseen).await; // also after a close: nobody received this grant
        });
    }

    /// The lock this guard belongs to.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Release one level of the hold (at depth 0 the lock is deleted and waiters are woken).
    ///
    /// Errors: [`ErrorKind::NotHeld`] if this guard was already released;
    /// [`ErrorKind::Lost`] if the hold was lost meanwhile. A transient error at the last level
    /// leaves the guard unreleased so the call can be retried: the watchdog renews the hold for
    /// one more lease, then lets it run out. An inner level is released locally even then (the
    /// hold's next release sends every server its absolute count).
    ///
    /// A release whose future is dropped before it completes (a timeout around it, a cancelled
    /// task) is finished in the background, so the lock is not left taken by a guard that can no
    /// longer release it. The guard's next release waits for it and returns its outcome (or,
    /// after a transient failure, which leaves the level held, sends the release again).
    ///
    /// [`ErrorKind::Closed`] when the client was closed before this call: nothing is sent, the
    /// lease runs out. Whether it was is decided when `release` is called, not when the future
    /// first runs, so a release asked for before [`Client::close`](crate::Client::close) is sent
    /// even if its future runs after the close (a binding's spawned call, a SIGTERM handler that
    /// releases and then closes): it succeeds if it found the hold still there.
    pub fn release(&self) -> impl Future<Output = Result<()>> + Send + '_ {
        let (open, unseen) = (self.lock.inner.client.check_open(), self.unseen());
        async move {
            open?;
            self.release_open(unseen).await
        }
    }

    /// [`Guard::release`] as a `'static` future, for a guard shared by reference count (a
    /// binding spawns it on the runtime).
    pub fn release_shared(self: &Arc<Self>) -> impl Future<Output = Result<()>> + Send + 'static {
        let (open, unseen, guard) = (self.lock.inner.client.check_open(), self.unseen(), self.clone());
        async move {
            open?;
            guard.release_open(unseen).await
        }
    }

    /// [`Guard::release_shared`], started at once on the client's runtime, for a binding whose
    /// caller may stop waiting (a cancelled asyncio call): the release runs to its end either
    /// way, and until the returned future has reported its outcome, a release asked for meanwhile
    /// waits for this one and reports that outcome too (or sends the release again after a
    /// transient failure), as after a dropped [`Guard::release`]. (The binding learns of its
    /// caller's cancel only after it happened, so the outcome is offered from the start.)
    pub fn release_spawned(self: &Arc<Self>) -> impl Future<Output = Result<()>> + Send + 'static {
        let release = self.release_shared(); // before this one's outcome is offered
        let (tx, mut rx) = watch::channel(None);
        *self.flags.unseen_slot() = Some(rx.clone());
        self.lock.inner.client.inner.runtime.spawn(async move {
            tx.send_replace(Some(release.await));
        });
        let flags = self.flags.clone();
        async move {
            let r = outcome(&mut rx).await;
            flags.seen(&rx);
            r
        }
    }

    /// A release of this guard that its caller stopped waiting for: taken when a release is
    /// asked for (not when its future first runs), so that a release started for a caller that
    /// then stops waiting ([`Guard::release_spawned`]) never waits for itself.
    fn unseen(&self) -> Option<Outcome> {
        self.flags.unseen_slot().clone()
    }

    async fn release_open(&self, unseen: Option<Outcome>) -> Result<()> {
        if let Some(r) = self.unseen_release(unseen).await {
            return r;
        }
        if self.flags.released.swap(true, Ordering::AcqRel) {
            return Err(self.already_released());
        }
        let mut rest = ReleaseRest(Some((self.lock.clone(), self.hold.clone(), self.flags.clone())));
        let r = Self::release_level(&self.lock, &self.hold).await;
        rest.0 = None;
        self.flags.settle(&self.lock, &self.hold, &r);
        r
    }

    /// Wait for a release of this guard that its caller stopped waiting for ([`ReleaseRest`],
    /// [`Guard::release_spawned`]) and take its outcome; `None` when there is none, or when it failed transiently (the level is
    /// still held: this call sends the release again).
    async fn unseen_release(&self, unseen: Option<Outcome>) -> Option<Result<()>> {
        let mut rx = unseen?;
        let r = outcome(&mut rx).await;
        self.flags.seen(&rx);
        match r {
            Err(e) if e.kind().is_transient() => None,
            r => Some(r),
        }
    }

    /// One guard of `hold` is gone (dropped, or its level released): when it was the last live
    /// one, renewal stops and whatever the servers still count for this token runs out with its
    /// lease. (Another guard of the hold may have been dropped while this one's release was in
    /// flight, leaving the servers a level that no live guard can release.)
    fn gone(lock: &Lock, hold: &Hold) {
        if hold.drop_guard() == 0 {
            lock.inner.client.inner.watchdog.unregister(hold);
        }
    }

    /// One level's release, for the guard of `hold` (see [`Guard::release`]).
    async fn release_level(lock: &Lock, hold: &Arc<Hold>) -> Result<()> {
        let c = &lock.inner.client.inner;
        let _op = lock.inner.op.lock().await;
        let is_current = lock.current().is_some_and(|h| Arc::ptr_eq(&h, hold));
        if !is_current {
            let why = hold.lost_reason().map(|w| format!(": {w}")).unwrap_or_default();
            return Err(Error::new(
                ErrorKind::Lost,
                format!("the hold this guard belonged to was lost{why}"),
            ));
        }
        if hold.state() == LockState::Lost {
            // Clean up whatever is left under our token; never touches another owner's hold.
            if !c.watchdog.unregister_settled(hold, c.opts.response_timeout).await {
                lock.inner.pin.follow_renewals();
            }
            let sent = lock.send_release(0).await;
            lock.set_current(None);
            // The hold went final before this release: say why (a refused renewal or extend,
            // or the local lease deadline passing, which `state()` notices itself).
            let why = hold.lost_reason().unwrap_or_else(|| "no reason was recorded".to_owned());
            if why == crate::client::CLOSED_WHY && matches!(sent, Ok(n) if n >= 0) {
                // Asked for before the close (`release` checks then), run after it: the close
                // only marked the hold lost, and this release found it and freed it.
                return Ok(());
            }
            return Err(Error::new(ErrorKind::Lost, format!("the lock was lost before release: {why}")));
        }
        let target = hold.live_levels().saturating_sub(1);
        if target == 0 {
            // Cancel renewal before the release is sent, and let one already on its way land first.
            if !c.watchdog.unregister_settled(hold, c.opts.response_timeout).await {
                // Still on its way (a stalled server): the release queues behind it on its
                // connection instead.
                lock.inner.pin.follow_renewals();
            }
        }
        match lock.send_release_level(Level { count: target, fence: Some(hold.fence) }).await {
            Ok(n) if n < 0 => {
                let why = match &c.backend {
                    Backend::Single { .. } => {
                        "the release found the key gone or held by another owner".to_owned()
                    }
                    Backend::Quorum(q) => {
                        let n = q.nodes.len();
                        format!(
                            "the release found the key gone or held by another owner on more than \
                             {} of {n} masters (no quorum of {} still holds it)",
                            n.saturating_sub(q.quorum),
                            q.quorum,
                        )
                    }
                };
                lock.give_up(hold, &why);
                if target > 0 && matches!(c.backend, Backend::Quorum(_)) {
                    // An inner level: the masters that still have the hold keep it at that
                    // level, and the outer guard's release will find it given up and send
                    // nothing. Clear them now.
                    let _ = lock.send_release(0).await;
                }
                Err(Error::new(ErrorKind::Lost, format!("the lock was lost before release: {why}")))
            }
            Ok(n) => {
                let n = u32::try_from(n).unwrap_or(0);
                hold.set_count(n);
                if n == 0 {
                    hold.mark_released();
                    lock.set_current(None);
                }
                Ok(())
            }
            // An inner level (other guards of the hold stay live) is given up here even when no
            // server confirmed it in time: the handle's count is the truth, and the hold's next
            // release or re-entry sends every server its absolute count, which sets right a
            // server that missed this step. Kept instead, the level would stay on the servers
            // until the guard is dropped, which a garbage-collected binding (Node, Go) does only
            // when its collector runs: meanwhile the outer guard's release would leave the lock
            // held and renewed (a chaos run saw one Node handle re-enter it for every later grant).
            Err(e) if target > 0 && e.kind().is_transient() => Ok(()),
            Err(e) => {
                if target == 0 && !hold.is_final() {
                    // Renewed for one more lease, so a retry finds the hold alive; not beyond,
                    // or a guard abandoned after the failure (and not dropped: a collector that
                    // has not run) would keep the lock forever.
                    c.watchdog.register_for_retry(hold, lock);
                }
                Err(e)
            }
        }
    }

    /// Extend the lease to `ttl` from now (owner-checked): it sets the lease, so a `ttl` shorter
    /// than what is left shortens it. On a lock the watchdog renews, `ttl` becomes the lease of
    /// every later renewal too (renewed at a third of it). Fails with [`ErrorKind::Lost`] if the
    /// local deadline already passed or the server no longer holds it for this owner, and with
    /// [`ErrorKind::Closed`] once the client is closed.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        let lock = &self.lock;
        let c = &lock.inner.client;
        timing::check_ttl(&c.inner.opts, "ttl", ttl)?;
        c.check_open()?;
        if self.flags.released.load(Ordering::Acquire) {
            return Err(self.already_released());
        }
        let _op = lock.inner.op.lock().await;
        match self.hold.state() {
            LockState::Lost => return Err(self.lost_error()),
            LockState::Released => return Err(Error::new(ErrorKind::NotHeld, "the lock was released")),
            _ => {}
        }
        let conn = match &c.inner.backend {
            Backend::Single { conn, .. } => conn,
            Backend::Quorum(q) => return q.clone().extend(lock, &self.hold, ttl).await,
        };
        // Not ahead of a request of this handle still unanswered on the hot connection (a
        // re-entry setting the lock's own lease would otherwise cut this extend back).
        HotConn::settle_pin(c.inner.hot.as_ref(), conn, &lock.inner.pin).await.map_err(|e| c.error(&e))?;
        let (_still, lease) = c.inner.watchdog.lease_change(&self.hold, ttl, &c.inner.opts).await;
        let t_send = Instant::now();
        let r: i64 = match scripts::EXTEND
            .key(&lock.inner.keys.hold)
            .arg(&*lock.inner.token)
            .arg(timing::millis(ttl))
            .invoke_async(&mut conn.clone())
            .await
        {
            Ok(r) => r,
            Err(e) => return Err(c.error(&e)), // a shorter lease may be in force: bound above
        };
        if r != 1 {
            lock.give_up(&self.hold, "extend found the lock expired or held by another owner");
            return Err(Error::new(ErrorKind::Lost, "the lock was lost before extend"));
        }
        self.hold.leased(timing::deadline(&c.inner.opts, t_send, lease), ttl);
        c.inner.watchdog.leased(&self.hold);
        Ok(())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // SeqCst with `Flags::settle` (a release failing in the background meanwhile).
        self.flags.dropped.store(true, Ordering::SeqCst);
        if !self.flags.released.load(Ordering::SeqCst) {
            // Never release in Redis from a destructor: the lease runs out.
            self.flags.give_up(&self.lock, &self.hold);
        }
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("lock", &self.lock)
            .field("fence", &self.fence())
            .field("state", &self.state())
            .field("remaining", &self.remaining())
            .finish()
    }
}
