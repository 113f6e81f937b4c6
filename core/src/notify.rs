//! Release notifications (DESIGN §5).
//!
//! One RESP3 connection per client carries commands and pub/sub pushes. Waiters register on a
//! lock's channel *before* they try, so a release between their try and their wait is never
//! missed. Subscriptions are reference counted and linger after the last waiter leaves, so steady
//! contention costs no SUBSCRIBE/UNSUBSCRIBE round trips.
//!
//! Wake-one (single node): each release message wakes **one** waiter of this client, the oldest
//! one that has no wake pending (FIFO per lock name), instead of the whole herd. The others stay
//! asleep until the next release or their own bound (the holder's PTTL, the caller's deadline).
//! The rules that keep this from losing a wake-up:
//!
//! - A waiter's wake is *pending* from the message until its next [`Subscription::mark`], which
//!   it calls right before each try; a message that arrives after the mark wakes it again (or
//!   the next waiter) and the try that follows sees the release.
//! - Pushes and replies share one connection, in server order (a lock this client waits on keeps
//!   its requests off the hot-path connection, hot.rs): a message that is pending when a
//!   try's "granted" reply is read was published before that try ran, i.e. it is the release that
//!   this grant followed, so a granted waiter consumes its wake. (The connection manager hands
//!   pushes over through a task of its own, so a message can also be delivered after the reply
//!   that trailed it; it then wakes a waiter whose try finds the lock held: a try for nothing,
//!   never a lost wake.)
//! - A connection's *own* release message may reach the notifier before or after the releaser
//!   sees its reply (Redis 7.0 writes it just before the script's reply; the connection manager
//!   hands it over through its push task). Either way a releaser that re-acquires at once would
//!   reach the server before the waiter its message is about to wake: a newcomer of this client waits ([`Subscription::turn`], bounded) until that
//!   message arrived and the waiter it woke has tried. This keeps the queue FIFO per lock name
//!   within a client (no barging past a woken waiter); waiters of other clients still race.
//! - A waiter that leaves without a grant (timeout, cancellation, error) while it holds a wake —
//!   pending, or consumed by a mark whose try did not report "held" — passes it to the next
//!   waiter.
//! - A lost connection wakes every waiter (they retry and re-read the holder's PTTL); the
//!   connection manager resubscribes.
//!
//! Hand-on (single node, default mode): when this client fully releases a lock that its own
//! handles wait on, the next waiter is woken as soon as the release is queued on the connection
//! ([`Notifier::hand_on`]), so that its try follows the release on the wire: handing the lock
//! from one task or thread to another of the same client costs no round trip after the
//! release's message. That message (the first one delivered after the release went out) then
//! wakes nobody else if the release deleted the hold and the early try was granted; in every
//! other outcome its wake is handed on once the outcome is known ([`HandOnState`]).
//!
//! Fair mode (docs/PROTOCOL.md): a release that hands the lock to a queued waiter publishes
//! `G:<token>:<fence>:<lease>` instead of the hold's key. That message wakes only the waiter of this
//! client whose subscription carries that token ([`Subscription::set_token`]), with the fence
//! ([`Subscription::take_grant`]); no other waiter of this client is woken (the lock is held),
//! but each bounds its wait by the grantee's lease ([`Subscription::wait`]).
//! A grant kept by a waiter is cleared by its next [`Subscription::mark`]: a grant that arrived
//! before a try is reflected in that try's reply (the try finds this token holding), or was
//! undone by this client meanwhile.
//!
//! Redlock waiters use [`Notifier::peek_all`] / [`Notifier::subscribe_all`]: every message wakes
//! them (messages from N masters arrive on N connections, so the ordering argument above does not
//! hold across masters).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

use crate::client::PubSubConn;
use crate::error::{Error, Result};

/// One waiter's wake-up flags and waker.
struct Slot {
    /// A release (or reconnect) reached this waiter since its last mark. Set under the channel
    /// map's mutex; cleared by the waiter.
    woken: AtomicBool,
    /// A wake was consumed by a mark and the try after it has not reported "held" yet.
    owed: AtomicBool,
    /// Woken by a hand-on: its next try's outcome is reported to the channel.
    handed: AtomicBool,
    notify: Notify,
    /// Wake-one (FIFO) or every message (Redlock).
    fifo: bool,
    /// Fair mode: the owner token this waiter is queued with.
    token: std::sync::OnceLock<Arc<str>>,
    /// Fair mode: the fence of a grant to `token` announced since the last mark (0: none).
    grant: std::sync::atomic::AtomicU64,
    /// Fair mode: when the lease of a grant handed to *another* waiter since the last mark ends
    /// at the latest (see [`Subscription::wait`]).
    rearm: Mutex<Option<tokio::time::Instant>>,
}

impl Slot {
    fn rearm(&self, by: tokio::time::Instant) {
        let mut r = lock(&self.rearm);
        if r.is_none_or(|t| by < t) {
            *r = Some(by);
        }
        drop(r);
        self.notify.notify_waiters(); // not woken: [`Subscription::wait`] shortens its bound
    }

    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Woken and not yet done with the try that follows.
    fn busy(&self) -> bool {
        self.woken.load(Ordering::Acquire) || self.owed.load(Ordering::Acquire)
    }
}

struct Chan {
    refs: usize,
    subscribed: bool,
    /// A SUBSCRIBE was sent and may have reached the server, confirmed or not (its caller may
    /// have been cancelled or timed out): the sweep unsubscribes the channel once idle, so no
    /// subscription is left on the server for good.
    sent: bool,
    /// The sweep's UNSUBSCRIBE is on its way (on a stopped Redlock master it may wait for
    /// hours): no other is sent meanwhile, so they do not pile up there.
    unsubscribing: bool,
    idle_since: Option<Instant>,
    /// Registered waiters in arrival order (keys increase).
    waiters: BTreeMap<u64, Arc<Slot>>,
    /// Signalled whenever a woken FIFO waiter finishes its try or leaves, and on every message
    /// (see [`Subscription::turn`]).
    turn: Arc<Notify>,
    /// Messages delivered so far, and the count that the last release sent by this client will
    /// reach once its own message arrives (it may arrive before or after the release's reply
    /// is seen: see the module doc).
    delivered: u64,
    expect: u64,
    /// A hand-on in progress ([`Notifier::hand_on`]).
    hand_on: Option<HandOnState>,
}

/// A release of this client that woke a waiter before its message ([`Notifier::hand_on`]).
///
/// The first message delivered after the release went out (the release's own, or an older one
/// that trailed) wakes no FIFO waiter at once: it is *absorbed*. It stays absorbed only if the
/// release deleted the hold and the waiter woken early was granted by its next try: that grant
/// came after the release, so the lock is held again and a wake would only cost a try. In any
/// other outcome (release not deleting or unanswered, the woken waiter found the lock held, or
/// left) the absorbed wake is handed on as soon as that is known: the woken waiter's try may
/// have reached the server before the release (it can go out on another connection).
struct HandOnState {
    id: u64,
    /// The waiter woken early.
    waiter: u64,
    /// The first message delivered since the release went out woke no FIFO waiter.
    absorbed: bool,
    /// The release deleted the hold (`Some(true)`), or did not / is unknown (`Some(false)`).
    deleted: Option<bool>,
    /// The woken waiter's next try: granted (`Some(true)`), or held / left (`Some(false)`).
    granted: Option<bool>,
}

impl Chan {
    /// One release message: every broadcast waiter, and the oldest FIFO waiter without a
    /// pending wake; a fair grant (token, fence) wakes only the FIFO waiter queued with that
    /// token, if it is one of this client's.
    fn deliver(&mut self, grant: Option<Grant<'_>>) {
        let mut fifo_done = false;
        if grant.is_none()
            && let Some(h) = &mut self.hand_on
            && !h.absorbed
        {
            h.absorbed = true; // the first message since the release went out: see HandOnState
            fifo_done = true;
        }
        self.delivered += 1;
        self.turn.notify_waiters();
        for slot in self.waiters.values() {
            if !slot.fifo {
                slot.wake();
            } else if let Some(g) = &grant {
                if slot.token.get().is_some_and(|t| t.as_bytes() == g.token) {
                    if !fifo_done {
                        slot.grant.store(g.fence, Ordering::Release);
                        slot.wake();
                        fifo_done = true;
                    }
                } else if let Some(lease) = g.lease {
                    // The lock went to another waiter: if that waiter is dead, the lock is free
                    // again when its lease ends, with no message. Try by then at the latest.
                    slot.rearm(tokio::time::Instant::now() + lease);
                }
            } else if !fifo_done && !slot.woken.load(Ordering::Acquire) {
                slot.wake();
                fifo_done = true;
            }
        }
        self.resolve_hand_on();
    }

    /// End the hand-on once its outcome is known (see [`HandOnState`]).
    fn resolve_hand_on(&mut self) {
        let Some(h) = &self.hand_on else { return };
        let failed = h.deleted == Some(false) || h.granted == Some(false);
        let kept = h.deleted == Some(true) && h.granted == Some(true);
        if !(failed || kept && h.absorbed) {
            return; // (kept, not absorbed yet: the release's message absorbs when it comes)
        }
        let owed = h.absorbed && failed;
        self.hand_on = None;
        if owed {
            self.pass_on();
        }
    }

    /// The hand-on's waiter `id` reports its try: granted, or held / left.
    fn hand_on_try(&mut self, id: u64, granted: bool) {
        if let Some(h) = self.hand_on.as_mut().filter(|h| h.waiter == id && h.granted.is_none()) {
            h.granted = Some(granted);
            self.resolve_hand_on();
        }
    }

    /// The next FIFO waiter without a pending wake gets one (a wake handed on); returns its id.
    fn pass_on(&self) -> Option<u64> {
        let (&id, slot) = self.waiters.iter().find(|(_, s)| s.fifo && !s.woken.load(Ordering::Acquire))?;
        slot.wake();
        Some(id)
    }

    fn wake_all(&mut self) {
        self.hand_on = None; // every waiter tries again
        for slot in self.waiters.values() {
            slot.wake();
        }
    }
}

#[derive(Default)]
pub(crate) struct Notifier {
    channels: Mutex<HashMap<Vec<u8>, Chan>>,
    next_id: std::sync::atomic::AtomicU64,
    /// Serialises SUBSCRIBE/UNSUBSCRIBE so they reach the server in decision order.
    ops: tokio::sync::Mutex<()>,
    /// Signalled on drop, so that [`Notifier::sweep`] ends (and lets go of its connection) as
    /// soon as the client is gone rather than at its next tick.
    gone: Arc<Notify>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.gone.notify_one();
    }
}

/// A fair grant's message: the token handed the lock, its fence, and its lease when the message
/// carries one.
#[derive(Debug, PartialEq)]
struct Grant<'a> {
    token: &'a [u8],
    fence: u64,
    lease: Option<Duration>,
}

/// Parse a fair grant's message `G:<token>:<fence>:<lease ms>` (or `G:<token>:<fence>` as sent
/// before the lease was added). Tokens are hex, so the fields split at every ':'; a hold key
/// always contains `{`, so a plain release message never parses as one.
fn parse_grant(payload: &[u8]) -> Option<Grant<'_>> {
    let rest = payload.strip_prefix(b"G:")?;
    let mut fields = rest.split(|&b| b == b':');
    let token = fields.next().filter(|t| !t.is_empty() && !t.contains(&b'{'))?;
    let number = |f: &[u8]| std::str::from_utf8(f).ok()?.parse::<u64>().ok();
    let fence = number(fields.next()?).filter(|&f| f > 0)?;
    let lease = match fields.next() {
        None => None,
        Some(f) => Some(Duration::from_millis(number(f)?)),
    };
    fields.next().is_none().then_some(Grant { token, fence, lease })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Notifier {
    /// Called by the connection driver for every push; must not block.
    pub fn on_push(&self, info: PushInfo) {
        match info.kind {
            PushKind::Message | PushKind::SMessage => {
                let name = match info.data.first() {
                    Some(Value::BulkString(b)) => b.as_slice(),
                    _ => return,
                };
                let grant = match info.data.get(1) {
                    Some(Value::BulkString(p)) => parse_grant(p),
                    _ => None,
                };
                if let Some(chan) = lock(&self.channels).get_mut(name) {
                    chan.deliver(grant);
                }
            }
            PushKind::Disconnection => {
                for chan in lock(&self.channels).values_mut() {
                    chan.delivered = chan.delivered.max(chan.expect);
                    chan.wake_all();
                    chan.turn.notify_waiters();
                }
            }
            _ => {}
        }
    }

    /// `channel`'s subscription was lost and is in place again (cluster_sub.rs): every waiter
    /// tries again, as after a reconnection, so a release during the gap is not missed.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub fn wake_channel(&self, channel: &[u8]) {
        if let Some(chan) = lock(&self.channels).get_mut(channel) {
            chan.delivered = chan.delivered.max(chan.expect);
            chan.wake_all();
            chan.turn.notify_waiters();
        }
    }

    /// Tests only: how many release channels this notifier keeps an entry for.
    pub fn channel_count(&self) -> usize {
        lock(&self.channels).len()
    }

    /// A wake-one subscription to `channel` if the connection is already subscribed (no I/O).
    pub fn peek(self: &Arc<Self>, channel: &[u8]) -> Option<Subscription> {
        self.peek_mode(channel, true)
    }

    /// Like [`Self::peek`], but every release message wakes this waiter (Redlock).
    pub fn peek_all(self: &Arc<Self>, channel: &[u8]) -> Option<Subscription> {
        self.peek_mode(channel, false)
    }

    fn peek_mode(self: &Arc<Self>, channel: &[u8], fifo: bool) -> Option<Subscription> {
        let mut map = lock(&self.channels);
        let chan = map.get_mut(channel).filter(|c| c.subscribed)?;
        Some(self.take_ref(chan, channel, fifo))
    }

    fn take_ref(self: &Arc<Self>, chan: &mut Chan, channel: &[u8], fifo: bool) -> Subscription {
        chan.refs += 1;
        chan.idle_since = None;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            woken: AtomicBool::new(false),
            owed: AtomicBool::new(false),
            handed: AtomicBool::new(false),
            notify: Notify::new(),
            fifo,
            token: std::sync::OnceLock::new(),
            grant: std::sync::atomic::AtomicU64::new(0),
            rearm: Mutex::new(None),
        });
        chan.waiters.insert(id, slot.clone());
        Subscription {
            notifier: self.clone(),
            channel: channel.to_vec(),
            id,
            slot,
            turn: chan.turn.clone(),
            granted: false,
        }
    }

    /// A wake-one subscription to `channel` (one SUBSCRIBE round trip unless already subscribed).
    pub async fn subscribe(
        self: &Arc<Self>,
        conn: &impl PubSubConn,
        channel: &[u8],
        redact: &(dyn Fn(String) -> String + Sync),
    ) -> Result<Subscription> {
        self.subscribe_mode(conn, channel, redact, true).await
    }

    /// Like [`Self::subscribe`], but every release message wakes this waiter (Redlock).
    pub async fn subscribe_all(
        self: &Arc<Self>,
        conn: &impl PubSubConn,
        channel: &[u8],
        redact: &(dyn Fn(String) -> String + Sync),
    ) -> Result<Subscription> {
        self.subscribe_mode(conn, channel, redact, false).await
    }

    async fn subscribe_mode(
        self: &Arc<Self>,
        conn: &impl PubSubConn,
        channel: &[u8],
        redact: &(dyn Fn(String) -> String + Sync),
        fifo: bool,
    ) -> Result<Subscription> {
        let _ops = self.ops.lock().await;
        let sub = {
            let mut map = lock(&self.channels);
            let chan = map.entry(channel.to_vec()).or_insert_with(|| Chan {
                refs: 0,
                subscribed: false,
                sent: false,
                unsubscribing: false,
                idle_since: None,
                waiters: BTreeMap::new(),
                turn: Arc::new(Notify::new()),
                delivered: 0,
                expect: 0,
                hand_on: None,
            });
            let was_subscribed = chan.subscribed;
            chan.sent = true; // set before sending: see `Chan::sent`
            (self.take_ref(chan, channel, fifo), was_subscribed)
        };
        let (sub, was_subscribed) = sub;
        if !was_subscribed {
            if let Err(e) = conn.clone().subscribe(channel).await {
                drop(sub);
                return Err(Error::from_redis(&e, redact));
            }
            if let Some(chan) = lock(&self.channels).get_mut(channel) {
                chan.subscribed = true;
            }
        }
        Ok(sub)
    }

    /// Holds this notifier's SUBSCRIBE/UNSUBSCRIBE decisions (the sweep's included) off while the
    /// guard lives: a sentinel master switch subscribes every channel on the new master under it
    /// (sentinel.rs), so that no channel is taken back meanwhile on the old one.
    pub async fn hold_ops(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.ops.lock().await
    }

    /// Whether `channel` is subscribed (waiters of this client listen on it, or did lately).
    pub fn is_subscribed(&self, channel: &[u8]) -> bool {
        lock(&self.channels).get(channel).is_some_and(|c| c.subscribed)
    }

    /// Before this client sends a release that may delete the hold: the message count so far.
    pub fn releasing(&self, channel: &[u8]) -> Option<u64> {
        lock(&self.channels).get(channel).filter(|c| c.subscribed).map(|c| c.delivered)
    }

    /// Hand-on: this client's full release of `channel`'s hold, sent after [`Self::releasing`]
    /// returned `before`, is queued on its connection. Wake the next FIFO waiter now instead of
    /// when the release's message arrives: its try goes out right behind the release, and the
    /// handoff costs no round trip after the message. The message then wakes no one else
    /// unless the early try fails ([`HandOnState`]). `None` (nothing done) when no waiter is
    /// left to wake, another hand-on is in progress, or a message arrived since `before`.
    ///
    /// Settle the returned guard with the outcome of the release request it followed
    /// (dropping it counts as "not deleted").
    pub fn hand_on(self: &Arc<Self>, channel: &[u8], before: u64) -> Option<HandOn> {
        let mut map = lock(&self.channels);
        let chan = map.get_mut(channel)?;
        if chan.hand_on.is_some() || chan.delivered != before {
            return None;
        }
        let waiter = chan.pass_on()?;
        if let Some(slot) = chan.waiters.get(&waiter) {
            slot.handed.store(true, Ordering::Release);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        chan.hand_on = Some(HandOnState { id, waiter, absorbed: false, deleted: None, granted: None });
        Some(HandOn { notifier: self.clone(), channel: channel.to_vec(), id, settled: false })
    }

    fn settle_hand_on(&self, channel: &[u8], id: u64, deleted: bool) {
        let mut map = lock(&self.channels);
        let Some(chan) = map.get_mut(channel) else { return };
        if let Some(h) = chan.hand_on.as_mut().filter(|h| h.id == id) {
            h.deleted = Some(deleted);
            chan.resolve_hand_on();
        }
    }

    /// The waiter `id`, woken by a hand-on, reports its next try.
    fn report_hand_on(&self, channel: &[u8], id: u64, granted: bool) {
        if let Some(chan) = lock(&self.channels).get_mut(channel) {
            chan.hand_on_try(id, granted);
        }
    }

    /// The release sent after [`Self::releasing`] returned `before` deleted the hold: its message
    /// is on the way, and newcomers of this client let the waiter it wakes go first.
    pub fn released(&self, channel: &[u8], before: u64) {
        if let Some(c) = lock(&self.channels).get_mut(channel) {
            c.expect = c.expect.max(before + 1);
        }
    }

    /// A waiter leaves. A FIFO waiter that leaves without a grant hands on a wake it holds
    /// (pending, or owed: consumed by a try that did not report "held"); see the module doc.
    /// Checked under the map's lock, so a message arriving meanwhile is not lost either.
    fn drop_ref(&self, channel: &[u8], id: u64, may_pass: bool) {
        let mut map = lock(&self.channels);
        if let Some(chan) = map.get_mut(channel) {
            if let Some(slot) = chan.waiters.remove(&id)
                && slot.fifo
            {
                if may_pass && slot.busy() {
                    chan.pass_on();
                }
                chan.turn.notify_waiters();
            }
            chan.hand_on_try(id, !may_pass); // a hand-on's waiter leaving before its try reported
            chan.refs = chan.refs.saturating_sub(1);
            if chan.refs == 0 {
                if chan.subscribed || chan.sent {
                    chan.idle_since = Some(Instant::now()); // the sweep unsubscribes it
                } else {
                    map.remove(channel);
                }
            }
        }
    }

    /// Unsubscribe channels idle for at least `linger`, looking every [`sweep_period`]: a channel
    /// goes between `linger` and `linger` plus that period after its last waiter left. Runs until
    /// the client is dropped.
    /// `op_timeout` bounds how long a sweep waits for its UNSUBSCRIBEs (Redlock: a stopped
    /// master must not stall the sweep); one still unanswered then goes on in the background.
    pub async fn sweep(
        this: Weak<Self>,
        conn: impl PubSubConn,
        linger: Duration,
        op_timeout: Option<Duration>,
    ) {
        let period = sweep_period(linger);
        let Some(gone) = this.upgrade().map(|me| me.gone.clone()) else { return };
        loop {
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                () = gone.notified() => return,
            }
            let Some(me) = this.upgrade() else { return };
            let _ops = me.ops.lock().await;
            let idle: Vec<Vec<u8>> = {
                let mut map = lock(&me.channels);
                let mut idle = Vec::new();
                for (name, chan) in map.iter_mut() {
                    let old = chan.idle_since.is_some_and(|t| t.elapsed() >= linger);
                    if chan.refs == 0 && (chan.subscribed || chan.sent) && old && !chan.unsubscribing {
                        chan.subscribed = false; // peek() no longer hands it out
                        chan.sent = false;
                        chan.unsubscribing = true;
                        idle.push(name.clone());
                    }
                }
                idle
            };
            // All at once: they share one round trip on the multiplexed connection, so `ops`
            // (which a new waiter's SUBSCRIBE needs) is held for one reply, or one `op_timeout`
            // on a stopped master, not one per idle channel. An UNSUBSCRIBE still unanswered then
            // goes on without it (a later SUBSCRIBE of its channel queues behind it).
            let sent: Vec<_> = idle
                .into_iter()
                .map(|name| tokio::spawn(Self::unsubscribe_idle(this.clone(), conn.clone(), name)))
                .collect();
            let all = async {
                for s in sent {
                    let _ = s.await;
                }
            };
            match op_timeout {
                Some(t) => {
                    let _ = tokio::time::timeout(t, all).await;
                }
                None => all.await,
            }
        }
    }

    /// The sweep's UNSUBSCRIBE of the idle `channel`, and what its outcome means for the
    /// channel's entry. Holds no reference to the notifier while it waits: once the client is
    /// gone, the request is dropped within a second, and with it this handle on the connection.
    async fn unsubscribe_idle(this: Weak<Self>, mut conn: impl PubSubConn, channel: Vec<u8>) {
        let done = {
            let mut unsubscribe = std::pin::pin!(conn.unsubscribe(&channel));
            loop {
                match tokio::time::timeout(Duration::from_secs(1), &mut unsubscribe).await {
                    Ok(r) => break r.is_ok(),
                    Err(_) if this.strong_count() == 0 => return,
                    Err(_) => {}
                }
            }
        };
        let Some(me) = this.upgrade() else { return };
        let mut map = lock(&me.channels);
        let Some(chan) = map.get_mut(&channel) else { return };
        chan.unsubscribing = false;
        if chan.refs > 0 || chan.subscribed || chan.sent {
            return; // wanted again meanwhile: its own SUBSCRIBE went after this request
        }
        if done {
            map.remove(&channel);
        } else {
            // Not confirmed (the connection was down or broke): the connection still counts
            // the channel as subscribed and subscribes it again when it reconnects. Forgotten
            // here, it would stay subscribed for the client's life: the next sweep tries again.
            chan.sent = true;
        }
    }
}

/// A hand-on in progress ([`Notifier::hand_on`]); dropping it settles it as "not deleted".
pub(crate) struct HandOn {
    notifier: Arc<Notifier>,
    channel: Vec<u8>,
    id: u64,
    settled: bool,
}

impl HandOn {
    /// The release deleted the hold (`true`) or not.
    pub fn settle(mut self, deleted: bool) {
        self.settled = true;
        self.notifier.settle_hand_on(&self.channel, self.id, deleted);
    }
}

impl Drop for HandOn {
    fn drop(&mut self) {
        if !self.settled {
            self.notifier.settle_hand_on(&self.channel, self.id, false);
        }
    }
}

/// One waiter's place on a release channel.
pub(crate) struct Subscription {
    notifier: Arc<Notifier>,
    channel: Vec<u8>,
    id: u64,
    slot: Arc<Slot>,
    turn: Arc<Notify>,
    /// The waiter was granted the lock: whatever wake it holds is used.
    granted: bool,
}

impl Subscription {
    /// Call right before each try: [`Self::changed`] then waits for a release after this point.
    pub fn mark(&mut self) {
        self.slot.grant.store(0, Ordering::Release);
        *lock(&self.slot.rearm) = None; // the try's reply bounds the next wait
        if self.slot.woken.load(Ordering::Acquire) {
            self.slot.owed.store(true, Ordering::Release); // set before woken is cleared: busy()
            self.slot.woken.store(false, Ordering::Release);
        }
    }

    /// The try after the last mark found the lock held: its holder's release will wake someone.
    pub fn held(&mut self) {
        if self.slot.handed.swap(false, Ordering::AcqRel) {
            self.notifier.report_hand_on(&self.channel, self.id, false);
        }
        if self.slot.owed.swap(false, Ordering::AcqRel) {
            self.turn.notify_waiters();
        }
    }

    /// Wait while an older FIFO waiter of this client is woken and has not finished its try (or
    /// is about to be woken by this client's own release), at most `bound`: a newcomer does not
    /// barge ahead of the waiter a release just woke (FIFO per lock name within a client). Safe
    /// to cut short: the caller then simply tries.
    pub async fn turn(&self, bound: Duration) {
        if !self.slot.fifo {
            return;
        }
        let wait = async {
            loop {
                let notified = self.turn.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !self.ahead_busy() {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(bound, wait).await;
    }

    fn ahead_busy(&self) -> bool {
        let map = lock(&self.notifier.channels);
        map.get(&self.channel).is_some_and(|c| {
            let mut older = c.waiters.range(..self.id).map(|(_, s)| s).filter(|s| s.fifo).peekable();
            older.peek().is_some() && (c.delivered < c.expect || older.any(|s| s.busy()))
        })
    }

    /// Fair mode: the owner token this waiter queues with (set before its first try).
    pub fn set_token(&self, token: Arc<str>) {
        let _ = self.slot.token.set(token);
    }

    /// Fair mode: the fence of a grant to this waiter's token announced since the last mark.
    pub fn take_grant(&self) -> Option<u64> {
        match self.slot.grant.swap(0, Ordering::AcqRel) {
            0 => None,
            f => Some(f),
        }
    }

    /// The try after the last mark was granted: no wake to hand on.
    pub fn granted(&mut self) {
        self.granted = true;
        if self.slot.handed.swap(false, Ordering::AcqRel) {
            self.notifier.report_hand_on(&self.channel, self.id, true);
        }
    }

    /// Waits until a release (or a reconnect) reached this waiter since the last [`Self::mark`],
    /// or `bound` passed. A fair hand-over to another waiter shortens the bound to the end of
    /// that waiter's lease (docs/PROTOCOL.md, "Fair mode"): if it died, nothing else would
    /// announce that the lock is free again.
    pub async fn wait(&mut self, bound: Duration) {
        let mut until = tokio::time::Instant::now() + bound;
        loop {
            let notified = self.slot.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.slot.woken.load(Ordering::Acquire) {
                return;
            }
            if let Some(by) = lock(&self.slot.rearm).take() {
                until = until.min(by);
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }

    /// Resolves once a release (or a reconnect) reached this waiter since the last
    /// [`Self::mark`].
    pub async fn changed(&mut self) {
        loop {
            let notified = self.slot.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.slot.woken.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.notifier.drop_ref(&self.channel, self.id, !self.granted);
    }
}

/// How often [`Notifier::sweep`] looks for idle channels: a quarter of the linger, so that a
/// channel outlives its linger by at most a quarter of it (it looked once per linger, and a
/// channel could stay for twice its linger), but not more often than every 100 ms.
fn sweep_period(linger: Duration) -> Duration {
    (linger / 4).max(Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CH: &[u8] = b"ferrolock:{t}:released";

    /// A channel goes at most a quarter of its linger late (it could stay twice its linger),
    /// and a short linger does not make the sweep spin.
    #[test]
    fn the_sweep_looks_every_quarter_linger() {
        assert_eq!(sweep_period(Duration::from_secs(10)), Duration::from_millis(2500));
        assert_eq!(sweep_period(Duration::from_secs(1)), Duration::from_millis(250));
        assert_eq!(sweep_period(Duration::from_millis(200)), Duration::from_millis(100));
        assert_eq!(sweep_period(Duration::ZERO), Duration::from_millis(100));
    }

    /// A notifier with `CH` marked subscribed (no server: pushes are fed by hand).
    fn notifier() -> Arc<Notifier> {
        let n = Arc::new(Notifier::default());
        lock(&n.channels).insert(
            CH.to_vec(),
            Chan {
                refs: 0,
                subscribed: true,
                sent: true,
                unsubscribing: false,
                idle_since: None,
                waiters: BTreeMap::new(),
                turn: Arc::new(Notify::new()),
                delivered: 0,
                expect: 0,
                hand_on: None,
            },
        );
        n
    }

    fn message(n: &Notifier) {
        n.on_push(PushInfo {
            kind: PushKind::Message,
            data: vec![Value::BulkString(CH.to_vec()), Value::BulkString(b"k".to_vec())],
        });
    }

    fn grant(n: &Notifier, payload: &[u8]) {
        n.on_push(PushInfo {
            kind: PushKind::Message,
            data: vec![Value::BulkString(CH.to_vec()), Value::BulkString(payload.to_vec())],
        });
    }

    // A SUBSCRIBE whose caller gave up before the reply (a timeout, a cancelled task) may still
    // reach the server: the channel used to be forgotten here and stay subscribed there for good
    // (soak audit: 87 channels left after 20,000 cancelled first waits). The sweep now takes it
    // back like any idle channel. Real server, stopped (SIGSTOP) while the SUBSCRIBE is sent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscribe_cut_short_is_unsubscribed_by_the_sweep() {
        use redis::IntoConnectionInfo;
        let server = ferrolock_testkit::RedisServer::start();
        let n = Arc::new(Notifier::default());
        let info = server.url().into_connection_info().unwrap();
        let opts = crate::ClientOptions::default();
        let target = crate::client::Target::from_info(info, &opts.tls).unwrap();
        let conn = target.manager(&opts, None, &n).await.unwrap();
        let linger = Duration::from_millis(200);
        tokio::spawn(Notifier::sweep(Arc::downgrade(&n), conn.clone(), linger, None));
        let numsub = || {
            let v: Vec<Value> = server.cmd(&["PUBSUB", "NUMSUB", std::str::from_utf8(CH).unwrap()]);
            matches!(v.get(1), Some(Value::Int(1)))
        };
        server.pause();
        let cut = tokio::time::timeout(Duration::from_millis(200), n.subscribe(&conn, CH, &|s| s)).await;
        assert!(cut.is_err(), "the subscribe should still be waiting for its reply");
        server.resume();
        let t0 = Instant::now();
        while !numsub() {
            assert!(t0.elapsed() < Duration::from_secs(2), "the SUBSCRIBE never reached the server");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        while numsub() {
            assert!(t0.elapsed() < Duration::from_secs(5), "the channel stayed subscribed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn a_fair_grant_wakes_its_token_only_and_a_mark_forgets_it() {
        let n = notifier();
        let w = waiting(&n, 3);
        w[1].set_token("bbb".into());
        w[2].set_token("ccc".into());
        grant(&n, b"G:ccc:42");
        assert_eq!((woken(&w[0]), woken(&w[1]), woken(&w[2])), (false, false, true));
        assert_eq!(w[2].take_grant(), Some(42));
        assert_eq!(w[2].take_grant(), None, "a grant is taken once");
        grant(&n, b"G:zzz:43"); // another client's waiter: nobody here is woken
        assert!(!woken(&w[0]) && !woken(&w[1]));
        grant(&n, b"G:bbb:44");
        let mut w = w;
        w[1].mark();
        assert_eq!(w[1].take_grant(), None, "a grant announced before a try outlived the try");
        // Payloads that are not grants: hold keys (they contain '{'), malformed fields.
        for p in [
            &b"ferrolock:{G:x}"[..],
            b"G:ccc:",
            b"G:ccc:x",
            b"G:ccc:0",
            b"G:",
            b"G::7",
            b"G:ccc:7:",
            b"G:ccc:7:x",
            b"G:ccc:7:100:1",
            b"G:{a}:7",
        ] {
            assert_eq!(parse_grant(p), None, "{}", String::from_utf8_lossy(p));
        }
        let g = |token: &'static [u8], fence, lease| Some(Grant { token, fence, lease });
        assert_eq!(parse_grant(b"G:ab:7"), g(b"ab", 7, None), "the message without a lease");
        assert_eq!(parse_grant(b"G:ab:7:2500"), g(b"ab", 7, Some(Duration::from_millis(2500))));
    }

    // A grant to another token shortens the others' wait to that grant's lease (the grantee
    // may be dead: nothing else announces the end of its hold); the grantee is woken at once.
    #[tokio::test(start_paused = true)]
    async fn a_grant_to_another_token_bounds_the_wait_by_its_lease() {
        let n = notifier();
        let mut w = waiting(&n, 2);
        w[0].set_token("aaa".into());
        w[1].set_token("bbb".into());
        let t0 = tokio::time::Instant::now();
        let mut w1 = w.pop().unwrap();
        let waiter = tokio::spawn(async move {
            w1.wait(Duration::from_secs(60)).await;
            (tokio::time::Instant::now(), woken(&w1))
        });
        tokio::task::yield_now().await;
        grant(&n, b"G:aaa:5:3000");
        assert!(woken(&w[0]), "the grantee is woken");
        let (t, was_woken) = waiter.await.unwrap();
        assert!(!was_woken, "another token's grant wakes nobody else");
        assert_eq!(t - t0, Duration::from_secs(3), "the wait ends with the grantee's lease");

        // Control: without the lease in the message, the same wait runs to its own bound.
        let t0 = tokio::time::Instant::now();
        let mut w1 = n.peek(CH).unwrap();
        w1.mark();
        w1.set_token("ccc".into());
        let waiter = tokio::spawn(async move {
            w1.wait(Duration::from_secs(60)).await;
            tokio::time::Instant::now()
        });
        tokio::task::yield_now().await;
        grant(&n, b"G:aaa:6");
        assert_eq!(waiter.await.unwrap() - t0, Duration::from_secs(60));
    }

    fn woken(s: &Subscription) -> bool {
        s.slot.woken.load(Ordering::Acquire)
    }

    /// Payloads a publisher may send: any bytes, bytes after `G:`, and grant-shaped messages
    /// with tokens the waiters below hold (or not) and any numbers.
    fn payload() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..48),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| [b"G:".as_slice(), &b].concat()),
            ("(aaa|bbb|ccc|a\\{|)", any::<u64>(), proptest::option::of(any::<u64>())).prop_map(
                |(t, f, l)| {
                    match l {
                        Some(l) => format!("G:{t}:{f}:{l}"),
                        None => format!("G:{t}:{f}"),
                    }
                    .into_bytes()
                }
            ),
        ]
    }

    proptest::proptest! {
        // Anyone allowed to publish on a lock's channel can send anything there. Every payload is
        // a release, a grant or nothing; nothing panics (a lease of 2^64 − 1 ms included), and a
        // waiter bounded by a forged grant's lease still ends its wait by its own bound.
        #[test]
        fn any_payload_on_the_channel_is_taken_or_ignored(p in payload()) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
            rt.block_on(async {
                let n = notifier();
                let mut w = waiting(&n, 3);
                w[0].set_token("aaa".into());
                w[1].set_token("bbb".into());
                grant(&n, &p);
                let parsed = parse_grant(&p);
                if let Some(g) = &parsed {
                    let sane = g.fence > 0 && !g.token.is_empty() && !g.token.contains(&b'{');
                    proptest::prop_assert!(sane, "{:?} from {:?}", g, p);
                }
                let t0 = tokio::time::Instant::now();
                for s in &mut w {
                    s.wait(Duration::from_secs(5)).await;
                }
                proptest::prop_assert!(t0.elapsed() <= Duration::from_secs(15));
                let to_aaa = parsed.as_ref().is_some_and(|g| g.token == b"aaa");
                proptest::prop_assert_eq!(w[0].take_grant().is_some(), to_aaa);
                Ok(())
            })?;
        }

        #[test]
        fn a_grant_message_reads_back_as_written(
            token in "[0-9a-f]{1,40}",
            fence in 1u64..,
            lease in proptest::option::of(proptest::prelude::any::<u64>()),
        ) {
            let text = match lease {
                Some(l) => format!("G:{token}:{fence}:{l}"),
                None => format!("G:{token}:{fence}"),
            };
            let g = parse_grant(text.as_bytes());
            proptest::prop_assert_eq!(g, Some(Grant { token: token.as_bytes(), fence, lease: lease.map(Duration::from_millis) }));
        }
    }

    /// Waiters that tried and found the lock held, in arrival order.
    fn waiting(n: &Arc<Notifier>, k: usize) -> Vec<Subscription> {
        (0..k)
            .map(|_| {
                let mut s = n.peek(CH).unwrap();
                s.mark();
                s.held();
                s
            })
            .collect()
    }

    #[test]
    fn one_message_wakes_the_oldest_waiter_only() {
        let n = notifier();
        let subs = waiting(&n, 3);
        message(&n);
        assert_eq!(subs.iter().map(woken).collect::<Vec<_>>(), [true, false, false]);
        // A second message before the first waiter tried goes to the next one.
        message(&n);
        assert_eq!(subs.iter().map(woken).collect::<Vec<_>>(), [true, true, false]);
    }

    #[test]
    fn a_message_after_the_mark_wakes_the_same_waiter_again() {
        let n = notifier();
        let mut subs = waiting(&n, 2);
        message(&n);
        subs[0].mark(); // tries now; the release it tries after may be followed by another
        message(&n);
        assert!(woken(&subs[0]) && !woken(&subs[1]));
    }

    #[test]
    fn a_waiter_leaving_with_a_wake_passes_it_on() {
        // Pending wake, never tried (timeout, cancellation).
        let n = notifier();
        let mut subs = waiting(&n, 3);
        message(&n);
        drop(subs.remove(0));
        assert!(woken(&subs[0]) && !woken(&subs[1]));

        // Consumed by a mark, but the try never reported "held" (cancelled mid-flight).
        let n = notifier();
        let mut subs = waiting(&n, 2);
        message(&n);
        subs[0].mark();
        drop(subs.remove(0));
        assert!(woken(&subs[0]));

        // Control: the try reported "held" (its holder will publish): nothing to hand on.
        let n = notifier();
        let mut subs = waiting(&n, 2);
        message(&n);
        subs[0].mark();
        subs[0].held();
        drop(subs.remove(0));
        assert!(!woken(&subs[0]));

        // Granted: the wake led to the grant; nothing to hand on either.
        let n = notifier();
        let mut subs = waiting(&n, 2);
        message(&n);
        subs[0].mark();
        subs[0].granted();
        drop(subs.remove(0));
        assert!(!woken(&subs[0]));
    }

    #[test]
    fn a_disconnection_wakes_everyone() {
        let n = notifier();
        let subs = waiting(&n, 3);
        n.on_push(PushInfo { kind: PushKind::Disconnection, data: vec![] });
        assert!(subs.iter().all(woken));
    }

    #[test]
    fn a_resubscribed_channel_wakes_its_waiters_only() {
        let n = notifier();
        let subs = waiting(&n, 2);
        n.wake_channel(b"ferrolock:{other}:released");
        assert!(!subs.iter().any(woken));
        n.wake_channel(CH);
        assert!(subs.iter().all(woken));
    }

    #[test]
    fn redlock_waiters_see_every_message() {
        let n = notifier();
        let fifo = waiting(&n, 2);
        let all = n.peek_all(CH).unwrap();
        message(&n);
        assert!(woken(&fifo[0]) && !woken(&fifo[1]) && woken(&all));
    }

    /// This client releases with a hand-on while `subs` wait: returns the guard.
    fn hand_on(n: &Arc<Notifier>) -> HandOn {
        let before = n.releasing(CH).unwrap();
        n.hand_on(CH, before).expect("a waiter to wake")
    }

    #[test]
    fn a_hand_on_wakes_the_oldest_waiter_before_the_message_and_absorbs_the_message() {
        let n = notifier();
        let mut subs = waiting(&n, 3);
        let h = hand_on(&n);
        assert_eq!(subs.iter().map(woken).collect::<Vec<_>>(), [true, false, false]);
        subs[0].mark();
        h.settle(true);
        subs[0].granted();
        drop(subs.remove(0)); // its acquire returns
        message(&n); // the release's own, trailing the grant
        assert!(!woken(&subs[0]) && !woken(&subs[1]), "a try for nothing: the lock is held again");
        // The hand-on is over: the next release's message wakes as usual.
        message(&n);
        assert_eq!(subs.iter().map(woken).collect::<Vec<_>>(), [true, false]);
    }

    #[test]
    fn a_message_absorbed_before_the_outcome_waits_for_it() {
        // Granted: the message that came first stays absorbed.
        let n = notifier();
        let mut subs = waiting(&n, 2);
        let h = hand_on(&n);
        subs[0].mark();
        message(&n);
        assert!(!woken(&subs[1]));
        subs[0].granted();
        h.settle(true);
        assert!(!woken(&subs[1]));

        // Held: the early try may have reached the server before the release (another
        // connection), so the absorbed wake is handed on (here: to the same waiter again).
        let n = notifier();
        let mut subs = waiting(&n, 2);
        let h = hand_on(&n);
        subs[0].mark();
        message(&n);
        h.settle(true);
        assert!(!woken(&subs[0]) && !woken(&subs[1]));
        subs[0].held();
        assert!(woken(&subs[0]) && !woken(&subs[1]));
    }

    #[test]
    fn a_release_that_did_not_delete_owes_the_absorbed_wake() {
        for how in ["settled", "dropped"] {
            let n = notifier();
            let mut subs = waiting(&n, 2);
            let h = hand_on(&n);
            subs[0].mark();
            message(&n); // someone else's release
            match how {
                "settled" => h.settle(false),
                _ => drop(h), // the release was cancelled or failed
            }
            assert!(woken(&subs[0]), "{how}: the absorbed wake was lost");
            assert!(!woken(&subs[1]), "{how}");
        }
        // Not deleted and nothing absorbed yet: the next message wakes as usual.
        let n = notifier();
        let mut subs = waiting(&n, 2);
        hand_on(&n).settle(false);
        subs[0].mark();
        subs[0].held();
        message(&n);
        assert!(woken(&subs[0]));
    }

    #[test]
    fn a_hand_on_waiter_that_leaves_hands_the_absorbed_wake_on() {
        let n = notifier();
        let mut subs = waiting(&n, 3);
        let h = hand_on(&n);
        message(&n);
        h.settle(true);
        drop(subs.remove(0)); // timed out before its try
        assert!(woken(&subs[0]), "the wake it held");
        assert!(woken(&subs[1]), "the absorbed message's wake");
    }

    #[test]
    fn no_hand_on_after_a_message_or_during_another() {
        let n = notifier();
        let _subs = waiting(&n, 3);
        let before = n.releasing(CH).unwrap();
        message(&n); // may be this release's own
        assert!(n.hand_on(CH, before).is_none());
        let h = hand_on(&n);
        let before = n.releasing(CH).unwrap();
        assert!(n.hand_on(CH, before).is_none(), "one hand-on at a time");
        drop(h);
        // A disconnection wakes everyone and ends the hand-on.
        let n = notifier();
        let subs = waiting(&n, 2);
        let _h = hand_on(&n);
        n.on_push(PushInfo { kind: PushKind::Disconnection, data: vec![] });
        assert!(subs.iter().all(woken));
        assert!(lock(&n.channels).get(CH).unwrap().hand_on.is_none());
    }

    #[tokio::test]
    async fn a_newcomer_lets_the_woken_waiter_try_first() {
        let n = notifier();
        let mut subs = waiting(&n, 2);
        // Nobody woken: a newcomer tries at once.
        let newcomer = n.peek(CH).unwrap();
        assert!(!newcomer.ahead_busy());
        drop(newcomer);
        // This client released: until its message arrives, and then while the woken waiter
        // tries, newcomers wait.
        let before = n.releasing(CH).unwrap();
        n.released(CH, before);
        let newcomer = n.peek(CH).unwrap();
        assert!(newcomer.ahead_busy());
        message(&n);
        assert!(newcomer.ahead_busy());
        subs[0].mark();
        assert!(newcomer.ahead_busy());
        subs[0].held();
        assert!(!newcomer.ahead_busy());
        // The wait is bounded.
        message(&n);
        let t0 = Instant::now();
        newcomer.turn(Duration::from_millis(20)).await;
        assert!(t0.elapsed() >= Duration::from_millis(20));
        drop(subs);
    }

    // (Mutation review.) A newcomer waiting for its turn goes as soon as the woken waiter's try
    // found the lock held, not at the end of its bound: `held()` must signal the turn (the test
    // above checks `ahead_busy()` only, so a `held()` that did not wake the newcomer passed it,
    // and each such newcomer's acquire then waited out its whole bound).
    #[tokio::test]
    async fn a_newcomer_goes_once_the_woken_waiter_found_the_lock_held() {
        let n = notifier();
        let mut subs = waiting(&n, 2);
        message(&n); // wakes subs[0]
        let newcomer = n.peek(CH).unwrap();
        assert!(newcomer.ahead_busy());
        let turn = tokio::spawn(async move {
            newcomer.turn(Duration::from_secs(30)).await;
        });
        tokio::task::yield_now().await; // the newcomer waits for its turn
        assert!(!turn.is_finished(), "control: the newcomer went before the woken waiter tried");
        subs[0].mark();
        subs[0].held();
        tokio::time::timeout(Duration::from_secs(5), turn)
            .await
            .expect("the newcomer still waits after the woken waiter found the lock held")
            .unwrap();
        drop(subs);
    }

    #[tokio::test]
    async fn changed_resolves_for_a_wake_before_or_during_the_wait() {
        let n = notifier();
        let mut subs = waiting(&n, 1);
        message(&n);
        tokio::time::timeout(Duration::from_secs(1), subs[0].changed()).await.unwrap();
        subs[0].mark();
        let n2 = n.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            message(&n2);
        });
        tokio::time::timeout(Duration::from_secs(1), subs[0].changed()).await.unwrap();
    }
}
