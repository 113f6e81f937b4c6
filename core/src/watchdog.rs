//! The watchdog (DESIGN §6): one scheduler task per client keeps every renewing hold alive and
//! watches every hold's local deadline.
//!
//! Renewals due together go out as one pipeline of owner-checked `extend` scripts, at `ttl / 3`;
//! renewals due within `ttl / 6` of a due one join its pipeline, so holds fall into step.
//! A failed or timed-out renewal makes the hold IN_DOUBT and is retried soon; a reply of "not
//! owner" or a passed local deadline makes it LOST. A hold is unregistered *before* its final
//! release is sent, and a renewal reply for an unregistered hold is ignored, so the watchdog
//! never re-creates a lost lock. A renewal already taken for sending when its hold is released
//! is waited for ([`Watchdog::unregister_settled`]), so it reaches the server before the
//! release, never after it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::client::Backend;
use crate::hold::Hold;
use crate::lock::{Lock, LockInner};
use crate::options::ClientOptions;
use crate::scripts::{EXTEND, is_noscript};
use crate::timing;

struct Entry {
    hold: Weak<Hold>,
    /// Its lock handle: the key and token a renewal sends, and, for a Redlock hold that a
    /// majority refused to renew, how it is cleared from the masters that still have it. (A live
    /// hold has a live handle: its guards and the handle's `current` keep both.)
    lock: Weak<LockInner>,
    next_due: Instant,
    in_flight: bool,
    /// No renewal is sent from this instant on (a hold whose release failed: see
    /// [`Watchdog::register_for_retry`]); the lease then runs out unless a retry comes first.
    renew_until: Option<Instant>,
    /// Renew once even if the hold does not renew (a fair hand-over's offer turned into the
    /// hold's lease: [`Watchdog::confirm`]); cleared by a renewal that counts.
    confirm: bool,
}

struct Shared {
    entries: Mutex<HashMap<u64, Entry>>,
    /// When the scheduler looks next (written by each tick while it holds `entries`): a new
    /// hold due later needs no wake-up, so an acquire costs no scheduler run and no scan of
    /// every live hold (see [`Watchdog::register`]).
    planned: Mutex<Instant>,
    wake: Arc<Notify>,
    next_id: AtomicU64,
    /// Holds whose renewal has been taken for sending and not answered yet (kept after the hold
    /// is unregistered), and the signal that one such renewal was answered.
    /// (With the lease length each was sent with.)
    flying: Mutex<HashMap<u64, Duration>>,
    landed: Notify,
    /// Tests only: a pause between taking renewals for sending and sending them, and whether a
    /// release waits for them (see [`Watchdog::set_test_knobs`]).
    test_delay_ms: AtomicU64,
    test_no_settle: AtomicBool,
    /// Scheduler runs so far (tests: an acquire due later than the next look wakes nothing).
    ticks: AtomicU64,
    /// How far ahead of its registration the latest hold was due (nanoseconds), and `next_id`
    /// as the last tick that found no hold saw it. A tick that finds no hold although holds were
    /// registered since looks again that far ahead rather than in an hour: in a loop of short
    /// holds, each released before the scheduler gets to run, the next acquire then finds a look
    /// planned before it is due and wakes nothing. Otherwise every acquire woke the scheduler,
    /// which found the hold already gone (bench/FINDINGS.md, "the watchdog's look per pair").
    last_due_in: AtomicU64,
    ids_seen: AtomicU64,
    /// Set (under `entries`) by [`Watchdog::close`]: the scheduler ends, nothing more is sent,
    /// and a hold registered later is lost at once.
    closed: AtomicBool,
    /// Held by `close` while it sets `closed`, and by each renewal round while it checks
    /// `closed` and hands its requests to the connection: no round starts after `close` returns.
    sending: Mutex<()>,
}

impl Shared {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn flying(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Duration>> {
        self.flying.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn planned(&self) -> std::sync::MutexGuard<'_, Instant> {
        self.planned.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

// The scheduler task holds only a `Weak<Shared>`, upgraded during a tick. So the signal that ends
// it must come once the last `Arc<Shared>` is gone, i.e. from `Shared`'s own drop. Sent from
// `Watchdog`'s drop (before its `Arc` field is released), the scheduler could wake, still upgrade
// the `Weak`, and then go back to sleep for an hour with nothing left to wake it, keeping the
// client's connection open.
impl Drop for Shared {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

pub(crate) struct Due {
    id: u64,
    pub hold: Arc<Hold>,
    pub key: Arc<[u8]>,
    pub token: Arc<str>,
    pub ttl: Duration,
    /// The hold's lease generation when this renewal was taken for sending.
    lease_gen: u64,
}

/// What one renewal round says about one hold.
pub(crate) enum Outcome {
    /// Confirmed (by a quorum, for Redlock).
    Renewed,
    /// The server (a majority of masters) says this owner no longer holds it.
    Refused,
    /// The script cache was empty: load it and retry at once.
    Noscript,
    /// No decision (timeouts, connection trouble, no quorum either way).
    Failed,
}

impl Watchdog {
    /// Start the scheduler on the current runtime.
    pub fn start(backend: Backend, opts: Arc<ClientOptions>) -> Watchdog {
        let shared = Arc::new(Shared {
            entries: Mutex::new(HashMap::new()),
            planned: Mutex::new(Instant::now()),
            wake: Arc::new(Notify::new()),
            next_id: AtomicU64::new(1),
            flying: Mutex::new(HashMap::new()),
            landed: Notify::new(),
            test_delay_ms: AtomicU64::new(0),
            test_no_settle: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
            last_due_in: AtomicU64::new(0),
            ids_seen: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            sending: Mutex::new(()),
        });
        tokio::spawn(run(Arc::downgrade(&shared), shared.wake.clone(), backend, opts));
        Watchdog { shared }
    }

    /// Track `hold`: renew it if `hold.renew`, and mark it lost at its local deadline.
    pub fn register(&self, hold: &Arc<Hold>, lock: &Lock) {
        self.insert(hold, lock, None, Instant::now() + hold.ttl() / 3);
    }

    /// Track `hold` again after its last level's release failed, so that a retry finds it
    /// alive: renewals go on for one more lease from now, then stop, and the lease runs out.
    /// A caller that abandons the guard without dropping it (a garbage-collected binding whose
    /// collector has not run yet) thus leaves the lock held for at most about two leases.
    ///
    /// The first renewal is due a third of a lease from now, as usual, but no later than a third
    /// of a lease before the hold's local deadline (at once if that has passed): the failure
    /// comes after the release's own retries (seconds, on a server that stopped answering),
    /// and renewed on the usual schedule the hold reached its deadline first and was reported
    /// lost, also when the release ran once the server answered again.
    pub fn register_for_retry(&self, hold: &Arc<Hold>, lock: &Lock) {
        let now = Instant::now();
        let third = hold.ttl() / 3;
        let due = (now + third).min(hold.deadline().checked_sub(third).unwrap_or(now)).max(now);
        self.insert(hold, lock, Some(now + hold.ttl()), due);
    }

    fn insert(&self, hold: &Arc<Hold>, lock: &Lock, renew_until: Option<Instant>, next_due: Instant) {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        // When the scheduler must look at this hold first: its first renewal, or, for a hold
        // that is not renewed, its deadline (to report it lost), as `tick` plans it.
        let due = if hold.renew { next_due.min(hold.deadline()) } else { hold.deadline() };
        let due_in = u64::try_from(due.saturating_duration_since(now).as_nanos()).unwrap_or(u64::MAX);
        self.shared.last_due_in.store(due_in, Ordering::Relaxed);
        let hold_ref = Arc::downgrade(hold);
        let entry = Entry {
            hold: hold_ref,
            lock: Arc::downgrade(&lock.inner),
            next_due,
            in_flight: false,
            renew_until,
            confirm: false,
        };
        // Read under `entries`, which the tick that wrote `planned` held: either that tick saw
        // this entry, or `planned` is what the scheduler sleeps until now.
        let sooner = {
            let mut entries = self.shared.entries();
            if self.shared.closed.load(Ordering::Relaxed) {
                // The client was closed (set under `entries`, so `close` saw no such entry).
                drop(entries);
                hold.mark_lost(crate::client::CLOSED_WHY);
                return;
            }
            entries.insert(id, entry);
            due < *self.shared.planned()
        };
        hold.set_watchdog(id);
        if sooner {
            self.shared.wake.notify_one();
        }
    }

    /// `hold`'s lease was set anew (extend, re-entry): renew it within a third of the new lease
    /// from now, not on the old schedule (a shorter lease would run out first). An owner that
    /// extends or re-enters has not abandoned the hold: a cut-off set by
    /// [`Self::register_for_retry`] is lifted.
    pub fn leased(&self, hold: &Hold) {
        let Some(id) = hold.watchdog_id() else { return };
        let due = Instant::now() + hold.ttl() / 3;
        let sooner = match self.shared.entries().get_mut(&id) {
            Some(e) => {
                e.renew_until = None;
                let sooner = due < e.next_due;
                if sooner {
                    e.next_due = due;
                }
                sooner
            }
            None => false,
        };
        if sooner {
            self.shared.wake.notify_one();
        }
    }

    /// `hold` was taken from a fair hand-over's offer (a lease shorter than its own): renew it
    /// to its lease at once, whether or not it renews (the owner-checked extend of
    /// docs/PROTOCOL.md, "Taking a handed-on grant"), off the acquire's path. Until that
    /// renewal counts, the hold's deadline is the offer's; a refusal reports it lost.
    pub fn confirm(&self, hold: &Hold) {
        let Some(id) = hold.watchdog_id() else { return };
        if let Some(e) = self.shared.entries().get_mut(&id) {
            e.confirm = true;
            e.next_due = Instant::now();
        }
        self.shared.wake.notify_one();
    }

    /// Before an extend or re-entry of `hold` is sent (either sets the server's lease): no
    /// renewal of it starts until the returned [`Still`] is dropped, and one already on its way
    /// is waited for, at most `bound`. Returns, with the guard, the lease length of a renewal
    /// still unanswered then: it may reach the server after the request and set that lease, so
    /// the request's confirmed deadline must count on no more than it.
    async fn hold_still(&self, hold: &Arc<Hold>, bound: Duration) -> (Still, Option<Duration>) {
        hold.changing.store(true, Ordering::Release);
        let still = Still { hold: hold.clone(), wake: self.shared.wake.clone() };
        let Some(id) = hold.watchdog_id() else { return (still, None) };
        let until = tokio::time::Instant::now() + bound;
        loop {
            let landed = self.shared.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            let Some(&ttl) = self.shared.flying().get(&id) else { return (still, None) };
            if tokio::time::timeout_at(until, landed).await.is_err() {
                return (still, Some(ttl));
            }
        }
    }

    /// Before an extend or re-entry that sets `hold`'s lease to `ttl` is sent: no renewal crosses
    /// it ([`Self::hold_still`]), and since the server may run it whatever becomes of the call
    /// (no answer, a caller that stops waiting, an undone Redlock round), the local bound follows
    /// at once ([`Hold::lease_unknown`]). Returns the guard, and the lease the request's confirmed
    /// deadline may count on (no more than a renewal still on its way sets).
    pub async fn lease_change(
        &self,
        hold: &Arc<Hold>,
        ttl: Duration,
        opts: &ClientOptions,
    ) -> (Still, Duration) {
        let (still, flying) = self.hold_still(hold, opts.response_timeout).await;
        let lease = flying.map_or(ttl, |f| f.min(ttl));
        hold.lease_unknown(timing::deadline(opts, Instant::now(), lease), ttl);
        self.leased(hold);
        (still, lease)
    }

    /// Stop tracking `hold` (before its release is sent, or when its last guard is dropped).
    pub fn unregister(&self, hold: &Hold) {
        if let Some(id) = hold.take_watchdog() {
            self.shared.entries().remove(&id);
        }
    }

    /// [`Self::unregister`], then wait (at most `bound`) until a renewal of `hold` that was
    /// already taken for sending has been answered. Call it right before sending a release, so
    /// the release reaches the server after that renewal and never the other way round.
    /// Returns `false` if that renewal is still unanswered after `bound`.
    pub async fn unregister_settled(&self, hold: &Hold, bound: Duration) -> bool {
        let Some(id) = hold.take_watchdog() else { return true };
        self.shared.entries().remove(&id);
        // A tick takes a renewal for sending (into `flying`) while it holds `entries`, from which
        // the hold is gone now: if none is flying, none will be, and there is nothing to wait
        // for (the common case: a release costs no clock read and no waiter set up).
        if self.shared.test_no_settle.load(Ordering::Relaxed) || !self.shared.flying().contains_key(&id) {
            return true;
        }
        let until = tokio::time::Instant::now() + bound;
        loop {
            let landed = self.shared.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            if !self.shared.flying().contains_key(&id) {
                return true;
            }
            if tokio::time::timeout_at(until, landed).await.is_err() {
                return false;
            }
        }
    }

    /// The client is closed: stop for good. Every tracked hold is marked lost with `why` (its
    /// loss callbacks run) and is renewed no more; renewals taken for sending but not sent yet
    /// are dropped. Idempotent; does not wait.
    pub fn close(&self, why: &str) {
        let taken = {
            let _sending = self.shared.sending.lock().unwrap_or_else(|p| p.into_inner());
            let mut entries = self.shared.entries();
            self.shared.closed.store(true, Ordering::Relaxed);
            std::mem::take(&mut *entries)
        };
        for e in taken.into_values() {
            if let Some(hold) = e.hold.upgrade() {
                hold.take_watchdog();
                hold.mark_lost(why);
            }
        }
        self.shared.wake.notify_one();
        self.shared.landed.notify_waiters();
    }

    /// Tests only: pause every renewal round of this client by `delay` before it is sent, and
    /// (`settle: false`, the controls of the late-renewal tests) let releases go without waiting
    /// for renewals already on their way, and send a renewal even for a hold that was released
    /// or lost while it waited.
    pub fn set_test_knobs(&self, delay: Duration, settle: bool) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.shared.test_delay_ms.store(ms, Ordering::Relaxed);
        self.shared.test_no_settle.store(!settle, Ordering::Relaxed);
    }

    /// Tests only: holds tracked, and renewals in flight.
    pub fn table_sizes(&self) -> (usize, usize) {
        (self.shared.entries().len(), self.shared.flying().len())
    }

    /// Tests only: how many times the scheduler has looked at its holds.
    pub fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }
}

/// While alive, no renewal of its hold starts ([`Watchdog::hold_still`]).
pub(crate) struct Still {
    hold: Arc<Hold>,
    wake: Arc<Notify>,
}

impl Drop for Still {
    fn drop(&mut self) {
        self.hold.changing.store(false, Ordering::Release);
        self.wake.notify_one(); // a renewal may have fallen due meanwhile
    }
}

async fn run(weak: Weak<Shared>, wake: Arc<Notify>, backend: Backend, opts: Arc<ClientOptions>) {
    loop {
        let next = {
            let Some(shared) = weak.upgrade() else { return };
            if shared.closed.load(Ordering::Relaxed) {
                return; // closed: the task ends and lets go of its connection
            }
            tick(&shared, &backend, &opts)
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = wake.notified() => {}
        }
    }
}

/// Mark expired holds lost, send due renewals, and return when to look again.
///
/// Batching: when at least one renewal is due, every renewal falling due within the next
/// `ttl / 6` of its hold goes in the same pipeline (renewing a little early is always safe; the
/// lease is measured from this send). Holds acquired over a spread of time thus fall into step
/// after one round and stay in one pipeline per tick, instead of one small pipeline each.
fn tick(shared: &Arc<Shared>, backend: &Backend, opts: &Arc<ClientOptions>) -> Instant {
    shared.ticks.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let mut next = now + Duration::from_secs(3600);
    let mut any_due = false;
    let mut soon: Vec<(u64, Arc<Hold>)> = Vec::new();
    let mut entries = shared.entries();
    // Set while `entries` is held, on every return (`register` reads it under the same lock).
    let plan = |next: Instant| {
        *shared.planned() = next;
        next
    };
    entries.retain(|&id, e| {
        let Some(hold) = e.hold.upgrade() else { return false };
        if hold.is_final() {
            return false; // state() marks a passed deadline as lost
        }
        next = next.min(hold.deadline());
        let renewing = (hold.renew || e.confirm)
            && e.renew_until.is_none_or(|until| now < until)
            && !hold.changing.load(Ordering::Acquire);
        if renewing && !e.in_flight {
            if now >= e.next_due {
                any_due = true;
                soon.push((id, hold));
            } else {
                if now + hold.ttl() / 6 >= e.next_due {
                    soon.push((id, hold));
                }
                next = next.min(e.next_due);
            }
        }
        true
    });
    if entries.is_empty() {
        let ids = shared.next_id.load(Ordering::Relaxed);
        if shared.ids_seen.swap(ids, Ordering::Relaxed) != ids {
            let due_in = Duration::from_nanos(shared.last_due_in.load(Ordering::Relaxed));
            next = now.checked_add(due_in).map_or(next, |t| next.min(t));
        }
    }
    if !any_due {
        return plan(next);
    }
    let mut due = Vec::with_capacity(soon.len());
    let mut flying = shared.flying();
    for (id, hold) in soon {
        if let Some(e) = entries.get_mut(&id)
            && let Some(lock) = e.lock.upgrade()
        {
            e.in_flight = true;
            let (ttl, lease_gen) = hold.lease();
            flying.insert(id, ttl);
            let (key, token) = (lock.hold_key.clone(), lock.token.clone());
            due.push(Due { id, hold, key, token, ttl, lease_gen });
        }
    }
    drop(flying);
    plan(next);
    drop(entries);
    // `next` may name a renewal sent now; the renewal's completion wakes the scheduler anyway.
    if backend.is_cluster() {
        // Each lock's renewal goes to its own slot's master, and one that hangs holds its
        // round for its timeouts and retries (seconds): a round of its own per lock, so that
        // a master in trouble delays and fails only its own locks' renewals. (One round for all
        // of them failed or stalled every lock of the client, and at their local deadlines the
        // locks on healthy masters were lost and left to expire.)
        for d in due {
            tokio::spawn(renew(shared.clone(), backend.clone(), opts.clone(), vec![d]));
        }
    } else {
        tokio::spawn(renew(shared.clone(), backend.clone(), opts.clone(), due));
    }
    next
}

async fn renew(shared: Arc<Shared>, backend: Backend, opts: Arc<ClientOptions>, due: Vec<Due>) {
    let delay = shared.test_delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    // A hold whose local deadline passed while its renewal waited to be sent was reported lost:
    // renewing it now could keep its lease alive on the server for nobody.
    let check = !shared.test_no_settle.load(Ordering::Relaxed);
    let (due, gone): (Vec<Due>, Vec<Due>) = due.into_iter().partition(|d| !(check && d.hold.is_final()));
    let t_send = Instant::now();
    let round = async {
        if due.is_empty() {
            return Vec::new();
        }
        match &backend {
            Backend::Single { conn, .. } => single_round(conn.clone(), &due).await,
            Backend::Quorum(q) => q.clone().renew_round(&due).await,
        }
    };
    // Closed meanwhile: send nothing (the holds were marked lost and forgotten by `close`).
    let mut outcomes =
        unless_closed(&shared, round).await.unwrap_or_else(|| due.iter().map(|_| Outcome::Failed).collect());
    // Sent nothing for these: `Renewed` of a final hold changes nothing below.
    outcomes.extend(gone.iter().map(|_| Outcome::Renewed));
    let due: Vec<Due> = due.into_iter().chain(gone).collect();
    let now = Instant::now();
    let mut noscript = false;
    let mut refused = Vec::new();
    let mut doubtful = Vec::new();
    {
        let mut entries = shared.entries();
        for (d, outcome) in due.iter().zip(outcomes) {
            let Some(e) = entries.get_mut(&d.id) else { continue }; // released meanwhile
            e.in_flight = false;
            let retry = now + (d.ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
            match outcome {
                // A confirmation that arrives after the local deadline counts for nothing:
                // state() has marked the hold lost by then.
                Outcome::Renewed if !d.hold.is_final() => {
                    // Not counted (an extend or re-entry set another lease meanwhile): renew
                    // with that lease at once, not on this renewal's schedule.
                    let counted = d.hold.renewed(timing::deadline(&opts, t_send, d.ttl), d.lease_gen);
                    e.next_due = if counted { t_send + d.ttl / 3 } else { now };
                    // Not counted: an extend or re-entry set the lease meanwhile (as the
                    // confirmation would have).
                    e.confirm = false;
                }
                Outcome::Renewed => {}
                Outcome::Refused => {
                    d.hold.take_watchdog();
                    let lock = entries.remove(&d.id).map(|e| e.lock);
                    // A hold renewed for a retry of its full release, which timed out after it
                    // was sent (`register_for_retry`): that release most likely ran, and the
                    // refusal is its doing. Decided by the fence counter below, not reported
                    // lost here (a false LOST, and `on_lost` for a lock released as asked).
                    let in_doubt = lock
                        .as_ref()
                        .and_then(Weak::upgrade)
                        .filter(|l| l.release_in_doubt() == d.hold.fence);
                    match (in_doubt, &backend) {
                        (Some(inner), Backend::Single { .. }) => doubtful.push((inner, d.hold.clone())),
                        _ => {
                            d.hold.mark_lost(REFUSED);
                            refused.extend(lock.map(|l| (l, d.hold.clone())));
                        }
                    }
                }
                Outcome::Noscript => {
                    noscript = true;
                    e.next_due = now;
                }
                Outcome::Failed => {
                    d.hold.in_doubt();
                    e.next_due = retry;
                }
            }
        }
    }
    {
        let mut flying = shared.flying();
        for d in &due {
            flying.remove(&d.id);
        }
    }
    shared.landed.notify_waiters();
    if let Backend::Single { conn, .. } = &backend {
        for (inner, hold) in doubtful {
            let mut conn = conn.clone();
            tokio::spawn(async move {
                // The fence counter still holds the hold's fence: nobody was granted the lock
                // since, so the key is gone by that release (or by its lease running out with
                // nobody after it): released. Otherwise, or when it cannot tell, lost.
                if crate::lock::no_grant_since(&mut conn, &inner.keys.fence, hold.fence).await {
                    hold.mark_released();
                } else {
                    hold.mark_lost(REFUSED);
                }
            });
        }
    }
    if let Backend::Quorum(q) = &backend {
        // The masters that still had these holds were just renewed: clear them, as `extend`
        // does, so that the lock is not kept from others for a lease nobody holds.
        for (lock, hold) in refused {
            if let Some(inner) = lock.upgrade() {
                tokio::spawn(q.clone().clear_refused(Lock { inner }, hold));
            }
        }
    }
    if noscript && let Backend::Single { conn, .. } = &backend {
        let _ = EXTEND.prepare_invoke().load_async(&mut conn.clone()).await;
    }
    shared.wake.notify_one();
}

const REFUSED: &str = "the server no longer holds this owner's lock (renewal refused)";

/// Runs `round` unless the client is closed. Its first poll, which hands its requests to the
/// connection, happens under `sending` after a look at `closed`: a round either started before
/// [`Watchdog::close`] returned, or sends nothing.
async fn unless_closed<T>(shared: &Shared, round: impl Future<Output = T>) -> Option<T> {
    let mut round = std::pin::pin!(round);
    let mut first = true;
    std::future::poll_fn(|cx| {
        if std::mem::take(&mut first) {
            let _sending = shared.sending.lock().unwrap_or_else(|p| p.into_inner());
            if shared.closed.load(Ordering::Relaxed) {
                return std::task::Poll::Ready(None);
            }
            return round.as_mut().poll(cx).map(Some);
        }
        round.as_mut().poll(cx).map(Some)
    })
    .await
}

/// One pipeline of owner-checked extends on a single server.
async fn single_round(mut conn: crate::client::Conn, due: &[Due]) -> Vec<Outcome> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for d in due {
        pipe.cmd("EVALSHA")
            .arg(EXTEND.get_hash())
            .arg(1)
            .arg(&*d.key)
            .arg(&*d.token)
            .arg(timing::millis(d.ttl));
    }
    let replies: redis::RedisResult<Vec<redis::RedisResult<i64>>> = pipe.query_async(&mut conn).await;
    match replies {
        Ok(replies) => replies
            .iter()
            .map(|r| match r {
                Ok(1) => Outcome::Renewed,
                Ok(_) => Outcome::Refused,
                Err(err) if is_noscript(err) => Outcome::Noscript,
                Err(err) => {
                    tracing::warn!("ferrolock: renewal failed: {}", err.code().unwrap_or("error"));
                    Outcome::Failed
                }
            })
            .collect(),
        Err(err) => {
            tracing::warn!(timeout = err.is_timeout(), "ferrolock: renewal round trip failed");
            due.iter().map(|_| Outcome::Failed).collect()
        }
    }
}
