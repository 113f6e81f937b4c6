//! Redlock (DESIGN §3–§6, docs/REDLOCK.md): the same [`Lock`] surface over N independent
//! masters, decided by a quorum.
//!
//! Every round (acquire, fence write-back, extend, renewal, release) goes to all masters at once,
//! each request bounded by the per-master timeout, and is decided as soon as a quorum agrees or
//! can no longer agree. A master that is slow or stopped adds nothing to the latency:
//!
//! * a request still unanswered a little after its round was decided counts as *late*; a request
//!   that times out makes its master *stalled* until one PING comes back (one PING outstanding at
//!   a time). A master with [`LATE_LIMIT`] late requests, or stalled, gets no new work (acquire,
//!   write-back, extend, renewal), so commands do not pile up on its connection; releases go only
//!   where an acquire of the handle may have landed, bounded by an in-flight cap.
//! * within one lock handle, requests to one master run in order through that master's *lane*:
//!   an undo is sent only after the acquire it undoes has answered or timed out, so it can never
//!   overtake it.
//!
//! Validity is measured from the monotonic stamp taken before the first request; the fence is
//! the largest one granted, written back (`raise_fence.lua`) to a quorum before the grant returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use redis::Value;
use redis::aio::ConnectionManager;
use tokio::sync::{mpsc, oneshot, watch};

use crate::client::{Client, Conn, LockInfo, Target, as_array, bytes_at, int_at, parse_num, redact_secrets};
use crate::error::{Error, ErrorKind, Result};
use crate::hold::Hold;
use crate::keys::Keys;
use crate::lock::{Guard, Lock, no_grant_since};
use crate::notify::{Notifier, Subscription};
use crate::options::ClientOptions;
use crate::watchdog::{Due, Outcome};
use crate::{scripts, timing};

/// Redlock connections have no driver-level response timeout: every request is bounded where it
/// is sent (rounds by the per-master timeout, unsubscribes by the sweep's bound), and the stall
/// probe's PING must stay outstanding until the master answers it. A timed-out PING would still
/// be queued on the connection, and the next probe would queue another one behind it: a master
/// stopped for an hour would run some 1,800 PINGs on resume (see `Node::stall`).
const NO_RESPONSE_TIMEOUT: Option<Duration> = None;

/// How many requests to one master may be past their round's decision, unanswered, before the
/// master gets no new work (per client). Healthy masters answer stragglers within microseconds.
const LATE_LIMIT: isize = 2;

/// One lock handle's lane to one master: its requests there run strictly in the order they were
/// issued (a chain of tickets taken synchronously by the caller, so a spawned task that has not
/// run yet can never be overtaken).
#[derive(Default)]
pub(crate) struct Lane {
    /// Completes (its sender is dropped) when the last request entered so far is over.
    tail: std::sync::Mutex<Option<oneshot::Receiver<()>>>,
    /// Whether an acquire of this handle may have reached the master since its last confirmed
    /// full release: only such masters need a release (the others cannot hold this token).
    touched: Arc<Touch>,
    /// The token of the handle's hold when this master granted it a lower fence and no
    /// write-back of the token was confirmed there (0: none): the full release raises the
    /// master's counter to it first, in the same lane slot, so that whoever is granted there
    /// after this hold is gone gets a larger token (docs/REDLOCK.md, "Fencing over the quorum").
    owed: AtomicU64,
}

impl Lane {
    fn touched(&self) -> bool {
        self.touched.get()
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Option<oneshot::Receiver<()>>> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an earlier request on this lane is still out.
    fn busy(&self) -> bool {
        let mut tail = self.tail();
        let pending =
            tail.as_mut().is_some_and(|rx| matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
        if !pending {
            *tail = None; // a completed receiver must not be polled again
        }
        pending
    }

    /// Take the next place in the lane (synchronously, in issue order).
    fn enter(&self) -> Ticket {
        let (done, rx) = oneshot::channel();
        let prev = self.tail().replace(rx);
        Ticket { prev, done: Some(done) }
    }
}

/// A place in a lane; dropping it lets the next request go (once every earlier one is over).
struct Ticket {
    prev: Option<oneshot::Receiver<()>>,
    done: Option<oneshot::Sender<()>>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Dropped before its turn came (a bounded wait gave up): hand the turn on only after
        // the earlier requests are over, so the chain's order holds.
        if let (Some(prev), Some(done)) = (self.prev.take(), self.done.take())
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = prev.await;
                drop(done);
            });
        }
    }
}

impl Ticket {
    /// Wait until every earlier request in the lane is over (cancel-safe: may be called again).
    async fn wait(&mut self) {
        if let Some(prev) = self.prev.as_mut() {
            let _ = prev.await;
        }
        self.prev = None;
    }
}

/// "Touched" as generations, so a release confirmed late never clears the mark of an acquire
/// queued after it: `marks` counts acquires sent or queued; a confirmed full release that started
/// when `marks` was m raises `cleared` to m.
#[derive(Default)]
struct Touch {
    marks: AtomicU64,
    cleared: AtomicU64,
    /// The generation covered by the latest full release (count 0) issued, confirmed or not.
    queued: AtomicU64,
    /// The latest generation whose acquire actually went out (not one that gave up in its lane).
    sent: AtomicU64,
    /// The generation covered by the latest full release that actually went out.
    released: AtomicU64,
}

impl Touch {
    fn get(&self) -> bool {
        self.marks.load(Ordering::Acquire) > self.cleared.load(Ordering::Acquire)
    }

    /// An acquire is about to be queued; returns its generation.
    fn mark(&self) -> u64 {
        self.marks.fetch_add(1, Ordering::AcqRel) + 1
    }

    fn now(&self) -> u64 {
        self.marks.load(Ordering::Acquire)
    }

    /// A full release covering generation `m` was sent (it may still be queued on the master).
    fn queue(&self, m: u64) {
        self.queued.fetch_max(m, Ordering::AcqRel);
    }

    /// No acquire was queued since the last full release sent: another one would only repeat it.
    fn covered(&self) -> bool {
        self.queued.load(Ordering::Acquire) >= self.marks.load(Ordering::Acquire)
    }

    /// Nothing of this handle queued up to generation `m` is left on the master.
    fn clear(&self, m: u64) {
        self.cleared.fetch_max(m, Ordering::AcqRel);
    }

    /// The acquire of generation `m` is going out now.
    fn sent(&self, m: u64) {
        self.sent.fetch_max(m, Ordering::AcqRel);
    }

    /// A full release covering generation `m` is going out now.
    fn released(&self, m: u64) {
        self.released.fetch_max(m, Ordering::AcqRel);
    }

    /// Every acquire that went out is already followed, on the same connection, by a full
    /// release that went out after it. Asked in lane order (every earlier request of the handle
    /// is over), a full release sent now would only repeat one that is on its way.
    fn released_since_sent(&self) -> bool {
        self.sent.load(Ordering::Acquire) <= self.released.load(Ordering::Acquire)
    }
}

/// One master of a Redlock client.
pub(crate) struct Node {
    /// `Conn::Direct`: a request refused on a connection that failed while the master was
    /// down is sent once more (client.rs, `refused_again`).
    conn: OnceLock<Conn>,
    pub notifier: Arc<Notifier>,
    addr: String,
    secrets: Vec<String>,
    /// Requests sent and not yet answered or timed out.
    inflight: AtomicUsize,
    /// Requests still unanswered after their round was decided (may dip below 0 for an instant).
    late: AtomicIsize,
    /// A request timed out; cleared by a PING that comes back.
    stalled: AtomicBool,
    probing: AtomicBool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Acquire, fence write-back, extend, renewal, reads: never sent to a late or stalled master.
    New,
    /// Release and undo: sent to every connected master, up to twice the in-flight cap.
    Cleanup,
    /// Not sent: a full release to a lagging master that already has one queued after this
    /// handle's last acquire there (it would only pile up behind it).
    Shed,
}

/// Decrements the master's in-flight count when the request is over.
struct Inflight(Arc<Node>);

impl Drop for Inflight {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Node {
    fn conn(&self) -> Option<Conn> {
        self.conn.get().cloned()
    }

    fn error(&self, e: &redis::RedisError) -> Error {
        Error::from_redis(e, &|s| redact_secrets(&self.secrets, s))
    }

    fn admit(self: &Arc<Self>, class: Class, cap: usize) -> Option<(Conn, Inflight)> {
        let conn = self.conn()?;
        let limit = match class {
            Class::New => {
                if self.lagging() {
                    return None;
                }
                cap
            }
            Class::Cleanup => cap.saturating_mul(2),
            Class::Shed => return None,
        };
        let mut cur = self.inflight.load(Ordering::Acquire);
        loop {
            if cur >= limit {
                return None;
            }
            match self.inflight.compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some((conn, Inflight(self.clone()))),
                Err(now) => cur = now,
            }
        }
    }

    /// Why [`Node::admit`] refused a request of `class`, for the error that reports this master.
    fn not_sent(&self, class: Class) -> Error {
        let why = if class == Class::Shed {
            "a release of this handle is already queued there"
        } else if self.conn.get().is_none() {
            "not connected yet (connecting in the background)"
        } else if self.stalled.load(Ordering::Acquire) {
            "a request timed out; no new work until it answers a PING"
        } else if self.late.load(Ordering::Acquire) >= LATE_LIMIT {
            "too many requests still unanswered"
        } else {
            "at its in-flight cap"
        };
        Error::new(ErrorKind::Connection, format!("not sent: {why}"))
    }

    /// Too many stragglers, or a timeout not yet cleared by a PING.
    fn lagging(&self) -> bool {
        self.late.load(Ordering::Acquire) >= LATE_LIMIT || self.stalled.load(Ordering::Acquire)
    }

    /// A request timed out: no new work until a PING comes back. The PING is queued behind
    /// whatever the master still has to answer, so its reply also means the backlog is gone.
    /// It waits as long as that takes (the connection has no response timeout): one PING per
    /// stall, however long the master stays stopped; a new one only after the connection
    /// failed (the master was killed, the connection is re-established).
    fn stall(self: &Arc<Self>, timeout: Duration) {
        self.stalled.store(true, Ordering::Release);
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::debug!(master = %self.addr, "ferrolock: redlock master stalled; probing");
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut pause = timeout;
            loop {
                let Some(node) = weak.upgrade() else { return };
                // Set before any request could stall the master, and never unset.
                let Some(conn) = node.conn() else { return };
                drop(node);
                // Unbounded on purpose (see above): ends with the reply or a failed connection.
                // The wait holds no reference to the master: once the client is gone, the PING
                // is dropped within a second, and with it this handle on the connection.
                let mut ping = std::pin::pin!(async move {
                    let mut conn = conn;
                    redis::cmd("PING").query_async::<()>(&mut conn).await
                });
                let answered = loop {
                    match tokio::time::timeout(Duration::from_secs(1), &mut ping).await {
                        Ok(r) => break r.is_ok(),
                        Err(_) if weak.strong_count() == 0 => return,
                        Err(_) => {}
                    }
                };
                let Some(node) = weak.upgrade() else { return };
                if answered {
                    node.probing.store(false, Ordering::Release);
                    node.stalled.store(false, Ordering::Release);
                    tracing::debug!(master = %node.addr, "ferrolock: redlock master answers again");
                    return;
                }
                drop(node);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        });
    }
}

/// Marks a request late if its round is decided before it is answered (0 pending, 1 done, 2 late).
struct Slot {
    node: Arc<Node>,
    state: AtomicU8,
}

impl Slot {
    fn new(node: &Arc<Node>) -> Arc<Slot> {
        Arc::new(Slot { node: node.clone(), state: AtomicU8::new(0) })
    }

    fn done(&self) {
        if self.state.swap(1, Ordering::AcqRel) == 2 {
            self.node.late.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn mark_late(&self) {
        if self.state.compare_exchange(0, 2, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.node.late.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// A round was decided `took` after it started: requests still unanswered a little later (twice
/// as long as the round took after the decision, at least 2 ms, at most `cap`) count as late. A
/// healthy master's stragglers answer within that grace and never count.
fn mark_late_after(slots: Vec<Arc<Slot>>, took: Duration, cap: Duration) {
    let pending: Vec<Arc<Slot>> =
        slots.into_iter().filter(|s| s.state.load(Ordering::Acquire) == 0).collect();
    if pending.is_empty() {
        return;
    }
    let grace = (took * 2).max(Duration::from_millis(2)).min(cap);
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        for s in pending {
            s.mark_late();
        }
    });
}

/// One master's answer in a round.
enum Reply<T> {
    Ok(T),
    Err(Error),
    /// Not sent, and nothing to report: a release to a master that no acquire of this handle
    /// can have reached. A request that could not be sent is an `Err` saying why.
    Skipped,
}

/// The replies of one round as they arrive. Dropping it marks unanswered masters late.
struct FanOut<T> {
    rx: mpsc::UnboundedReceiver<(usize, Reply<T>)>,
    slots: Vec<Arc<Slot>>,
    left: usize,
    t0: Instant,
    timeout: Duration,
}

impl<T> FanOut<T> {
    async fn next(&mut self) -> Option<(usize, Reply<T>)> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.rx.recv().await
    }
}

impl<T> Drop for FanOut<T> {
    fn drop(&mut self) {
        mark_late_after(std::mem::take(&mut self.slots), self.t0.elapsed(), self.timeout);
    }
}

/// What one acquire round found.
pub(crate) enum Round {
    Granted(Guard),
    /// Granted, but the validity was used up (or the fence write-back missed its quorum): undone.
    Expired,
    /// A quorum of masters is held by another owner; the smallest holder PTTL, if any.
    Held {
        pttl: Option<u64>,
    },
    /// Enough masters answered but nobody has a quorum (a split vote); undone.
    Split {
        pttl: Option<u64>,
    },
    /// Fewer than a quorum of masters answered.
    Unreachable(Error),
    /// A re-entry found the handle's hold on fewer than a quorum of masters: the hold is marked
    /// lost and cleared everywhere; the caller tries again as a fresh acquire (as a single-node
    /// re-entry that finds the key gone gets a new grant).
    Superseded,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Pending,
    Keep,
    /// Put this token's count back to the value (0: compare-and-delete).
    Undo(u32),
}

enum AcqReply {
    /// A fresh hold, or (in a re-entry round) the handle's hold one deeper.
    Granted {
        fence: u64,
    },
    Held {
        pttl: i64,
    },
    Limit,
    /// A re-entry round found the key free there (the hold is gone) and made nothing.
    Gone,
}

/// N masters and the quorum rules (per client).
pub(crate) struct Quorum {
    pub nodes: Vec<Arc<Node>>,
    pub quorum: usize,
    opts: Arc<ClientOptions>,
}

impl Quorum {
    /// Connect to every master at once; return once every master answered, or a quorum is
    /// connected and the others did not within the per-master timeout: a master that does not
    /// answer (stopped, firewalled) keeps being tried in the background and adds at most that
    /// timeout to the connect once a quorum is up.
    pub async fn connect(
        targets: Vec<Target>,
        quorum: usize,
        opts: Arc<ClientOptions>,
    ) -> Result<Arc<Quorum>> {
        let nodes: Vec<Arc<Node>> = targets
            .iter()
            .map(|t| {
                Arc::new(Node {
                    conn: OnceLock::new(),
                    notifier: Arc::new(Notifier::default()),
                    addr: t.addr.clone(),
                    secrets: t.secrets.clone(),
                    inflight: AtomicUsize::new(0),
                    late: AtomicIsize::new(0),
                    stalled: AtomicBool::new(false),
                    probing: AtomicBool::new(false),
                })
            })
            .collect();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (node, t) in nodes.iter().zip(targets) {
            let (weak, notifier, opts, tx) =
                (Arc::downgrade(node), node.notifier.clone(), opts.clone(), tx.clone());
            tokio::spawn(async move {
                match t.manager(&opts, NO_RESPONSE_TIMEOUT, &notifier).await {
                    Ok(c) => {
                        if let Some(n) = weak.upgrade() {
                            start_node(&n, c, &opts);
                        }
                        let _ = tx.send(Ok(()));
                    }
                    Err(e) => {
                        tracing::warn!(master = %t.addr, "ferrolock: redlock master unreachable at connect: {e}");
                        let _ = tx.send(Err(e));
                        drop((notifier, tx));
                        reconnect(weak, t, opts).await;
                    }
                }
            });
        }
        drop(tx);
        // Every master that answers, or, once a quorum is up, those that answer within the
        // per-master timeout: a slower one is treated as down (and joins when it connects).
        let (mut up, mut first_err) = (0, None);
        let mut grace_until = None;
        loop {
            let next = match grace_until {
                None => rx.recv().await,
                Some(until) => match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            match next {
                Some(Ok(())) => up += 1,
                Some(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                None => break, // every master answered
            }
            if up >= quorum && grace_until.is_none() {
                grace_until = Some(tokio::time::Instant::now() + opts.redlock_node_timeout);
            }
        }
        if up < quorum {
            // A refusal that retrying cannot fix (credentials, TLS, ACL) is reported as itself.
            if let Some(e) = first_err.as_ref().filter(|e| !e.kind().is_transient()) {
                return Err(e.clone());
            }
            let why = first_err.map(|e| e.to_string()).unwrap_or_default();
            return Err(Error::new(
                ErrorKind::QuorumNotReached,
                format!("only {up} of {} masters reachable; the quorum is {quorum} ({why})", nodes.len()),
            ));
        }
        Ok(Arc::new(Quorum { nodes, quorum, opts }))
    }

    fn n(&self) -> usize {
        self.nodes.len()
    }

    fn timeout(&self) -> Duration {
        self.opts.redlock_node_timeout
    }

    fn unreachable(&self, answered: usize, what: &str) -> Error {
        Error::new(
            ErrorKind::QuorumNotReached,
            format!("{what}: {answered} of {} masters answered; the quorum is {}", self.n(), self.quorum),
        )
    }

    /// Send one request to every master that admits it, each bounded by the per-master timeout.
    /// `lanes`: wait for this handle's lane to each master first (ordering within the handle).
    fn fan_out<T, F, Fut>(&self, class: &dyn Fn(usize) -> Class, lanes: Option<&[Lane]>, make: F) -> FanOut<T>
    where
        T: Send + 'static,
        F: Fn(usize, Conn) -> Fut,
        Fut: Future<Output = std::result::Result<T, redis::RedisError>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut slots = Vec::new();
        let timeout = self.timeout();
        for (i, node) in self.nodes.iter().enumerate() {
            // With lanes (release), only masters this handle's acquires may have reached.
            if !lanes.is_none_or(|l| l[i].touched()) {
                let _ = tx.send((i, Reply::Skipped));
                continue;
            }
            let Some((conn, inflight)) = node.admit(class(i), self.opts.redlock_max_inflight) else {
                let _ = tx.send((i, Reply::Err(node.not_sent(class(i)))));
                continue;
            };
            let slot = Slot::new(node);
            slots.push(slot.clone());
            let mut ticket = lanes.map(|l| l[i].enter());
            let fut = make(i, conn);
            let (tx, node) = (tx.clone(), node.clone());
            tokio::spawn(async move {
                if let Some(t) = ticket.as_mut() {
                    t.wait().await;
                }
                let reply = match tokio::time::timeout(timeout, fut).await {
                    Ok(Ok(v)) => Reply::Ok(v),
                    Ok(Err(e)) => Reply::Err(node.error(&e)),
                    Err(_) => {
                        node.stall(timeout);
                        Reply::Err(Error::new(ErrorKind::Timeout, "the master did not answer in time"))
                    }
                };
                drop(inflight);
                let _ = tx.send((i, reply));
                slot.done();
                drop(ticket);
            });
        }
        FanOut { rx, slots, left: self.n(), t0: Instant::now(), timeout }
    }

    // ---- acquire ----

    /// One acquire round for `lock` (with its op lock taken here, waited for until `deadline`).
    pub async fn attempt(self: Arc<Self>, lock: &Lock, deadline: Option<Instant>) -> Result<Round> {
        let inner = &lock.inner;
        let _op = lock.op_until(deadline).await?;
        let prior = lock.live_count();
        let max = self.opts.max_reentrancy;
        if prior >= max {
            return Err(Error::new(
                ErrorKind::ReentrancyLimit,
                format!("re-entry refused: depth {max} is the limit"),
            ));
        }
        let current = if prior > 0 { lock.current() } else { None };
        // A re-entry counts only masters that still have the hold; where it is gone the script
        // makes nothing (`reenter`), so every grant in a re-entry round is a real re-entry.
        let reentry = current.is_some();
        let n = self.n();
        let (verdict_tx, verdict_rx) = watch::channel(Verdict::Pending);
        let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Reply<AcqReply>)>();
        let mut slots: Vec<Option<Arc<Slot>>> = vec![None; n];
        let timeout = self.timeout();
        let cap = self.opts.redlock_max_inflight;
        // A re-entry sets the lease to the lock's own length on every master it reaches, also in
        // a round that is undone or abandoned (`Watchdog::lease_change`).
        let mut lease = inner.ttl;
        let mut _still = None;
        if let Some(h) = &current {
            let (still, l) = inner.client.inner.watchdog.lease_change(h, inner.ttl, &self.opts).await;
            (_still, lease) = (Some(still), l);
        }
        let t_send = Instant::now();
        let floor = fence_floor();
        for (i, node) in self.nodes.iter().enumerate() {
            // A busy lane: an earlier request of this handle to this master is still out. Wait
            // for it (in the task) only if the master keeps up; otherwise leave it out.
            if inner.lanes[i].busy() && node.lagging() {
                let why =
                    "not sent: an earlier request of this handle is unanswered there, and the master lags";
                let _ = tx.send((i, Reply::Err(Error::new(ErrorKind::Connection, why))));
                continue;
            }
            let Some((conn, inflight)) = node.admit(Class::New, cap) else {
                let _ = tx.send((i, Reply::Err(node.not_sent(Class::New))));
                continue;
            };
            let lane = inner.lanes[i].enter();
            let generation = inner.lanes[i].touched.mark();
            let slot = Slot::new(node);
            slots[i] = Some(slot.clone());
            let mut inv = scripts::ACQUIRE.key(&inner.keys.hold);
            inv.key(&inner.keys.fence)
                .arg(&*inner.token)
                .arg(timing::millis(inner.ttl))
                .arg(timing::millis(self.opts.fence_retention))
                .arg(max)
                .arg("") // ARGV[5]: fair mode only
                .arg(&floor);
            if reentry {
                // ARGV[7]: where the hold is gone, make nothing (no fresh hold that an undone
                // round would leave behind for a later re-entry to count).
                inv.arg("reenter");
            }
            let task = AcquireTask {
                i,
                node: node.clone(),
                lane,
                inflight,
                slot,
                verdict: verdict_rx.clone(),
                tx: tx.clone(),
                prior,
                timeout,
                cap,
                keys: (inner.keys.hold.clone(), inner.keys.channel.clone()),
                token: inner.token.clone(),
                touched: (inner.lanes[i].touched.clone(), generation),
            };
            tokio::spawn(task.run(conn, inv));
        }
        drop(tx);

        let mut granted: Vec<(usize, u64)> = Vec::new();
        let (mut held, mut failed, mut limit) = (0usize, 0usize, 0usize);
        let mut gone = 0usize;
        let mut pttl: Option<u64> = None;
        let mut replied = vec![false; n];
        let mut first_err: Option<Error> = None;
        // What kept each failed master out of the round, for an error that ends it.
        let mut failures: Vec<String> = Vec::new();
        let mut got = 0;
        while got < n {
            let Some((i, reply)) = rx.recv().await else { break };
            got += 1;
            replied[i] = true;
            match reply {
                Reply::Ok(AcqReply::Granted { fence }) => granted.push((i, fence)),
                Reply::Ok(AcqReply::Gone) => gone += 1,
                Reply::Ok(AcqReply::Held { pttl: p }) => {
                    held += 1;
                    if let Ok(p) = u64::try_from(p) {
                        pttl = Some(pttl.map_or(p, |q| q.min(p)));
                    }
                }
                Reply::Ok(AcqReply::Limit) => limit += 1,
                Reply::Err(e) => {
                    failed += 1;
                    failures.push(format!("{}: {}", self.nodes[i].addr, e.message()));
                    if !e.kind().is_transient() {
                        first_err.get_or_insert(e);
                    }
                }
                Reply::Skipped => failed += 1,
            }
            if granted.len() >= self.quorum || n - held - failed - limit - gone < self.quorum {
                break;
            }
        }
        let stragglers: Vec<Arc<Slot>> =
            slots.iter().enumerate().filter(|&(i, _)| !replied[i]).filter_map(|(_, s)| s.clone()).collect();
        mark_late_after(stragglers, t_send.elapsed(), timeout);

        // Undo runs in each master's lane after the acquire it undoes. A failed round also waits
        // (at most 2 × the per-master timeout) for the undos on masters that answered, so that
        // a failure is reported with this handle's partial grants already gone.
        let answered: Vec<bool> = (0..n).map(|i| replied[i] && slots[i].is_some()).collect();
        let undo = |verdict_tx: watch::Sender<Verdict>| {
            let _ = verdict_tx.send(Verdict::Undo(prior));
        };
        if let Some(h) = &current
            && granted.len() < self.quorum
            && gone + held > n - self.quorum
        {
            // Certainly lost: more than N - quorum masters no longer had this hold (the key
            // was gone, or another owner holds it): clear this owner's holds everywhere, report
            // the loss, start afresh.
            lock.give_up(
                h,
                &format!(
                    "a re-entry found the hold on only {} of {n} masters (quorum {})",
                    granted.len(),
                    self.quorum
                ),
            );
            let _ = verdict_tx.send(Verdict::Undo(0));
            self.settle_lanes(lock, &answered).await;
            return Ok(Round::Superseded);
        }
        if granted.len() >= self.quorum {
            let top = granted.iter().map(|&(_, f)| f).max().unwrap_or(0);
            let fence = match &current {
                Some(h) => h.fence, // re-entry keeps the hold's token
                None => top,
            };
            let at_top = granted.iter().filter(|&&(_, f)| f == top).count();
            let mut confirmed = vec![false; n];
            let written = current.is_some() || at_top >= self.quorum || {
                let skip: Vec<usize> = granted.iter().filter(|&&(_, f)| f == top).map(|&(i, _)| i).collect();
                let won: Vec<usize> = granted.iter().map(|&(i, _)| i).collect();
                self.raise_fence(lock, top, &skip, &won, self.quorum - at_top, &mut confirmed).await
            };
            let deadline = timing::deadline(&self.opts, t_send, lease);
            if !written || deadline <= Instant::now() {
                undo(verdict_tx);
                self.settle_lanes(lock, &answered).await;
                if !written {
                    return Ok(Round::Unreachable(
                        self.unreachable(at_top, "the fence write-back missed its quorum"),
                    ));
                }
                return Ok(Round::Expired);
            }
            if current.is_none() {
                // A master that granted a lower fence and has no confirmed write-back of T gets
                // it from the release, before the hold is deleted there: the write-back itself
                // may still be unsent (another task) or lost with its connection, and a later
                // grant there would otherwise come from a counter below T.
                for (i, lane) in inner.lanes.iter().enumerate() {
                    let owed = granted.iter().any(|&(j, f)| j == i && f < top) && !confirmed[i];
                    lane.owed.store(if owed { top } else { 0 }, Ordering::Release);
                }
            }
            let _ = verdict_tx.send(Verdict::Keep);
            return Ok(Round::Granted(lock.granted(fence, prior + 1, deadline)));
        }
        undo(verdict_tx);
        self.settle_lanes(lock, &answered).await;
        // The round ends as soon as a quorum can no longer grant, so some masters may be
        // unheard: they did not fail, and could only have added holds to what decided it.
        // Whether failures kept a quorum from answering counts them with the answers.
        let unheard = n - got;
        let answered = held + granted.len() + limit;
        let reachable = answered + unheard;
        if let Some(e) = first_err
            && reachable < self.quorum
        {
            return Err(e); // a non-transient failure (auth, script, permission) is not retried
        }
        if limit > 0 && limit + granted.len() >= self.quorum {
            return Err(Error::new(
                ErrorKind::ReentrancyLimit,
                format!("re-entry refused: depth {max} is the limit"),
            ));
        }
        if held >= self.quorum || (reachable >= self.quorum && granted.is_empty() && held > 0) {
            // Held by another owner, and no grant of ours: also when a minority failed and the
            // rest were not waited for. Wait for the holder's release message.
            return Ok(Round::Held { pttl });
        }
        if reachable >= self.quorum {
            return Ok(Round::Split { pttl });
        }
        if unheard > 0 {
            // The round was decided without them: a quorum could no longer answer.
            failures.push(format!("{unheard} not waited for"));
        }
        let e = self.unreachable(answered, "acquire");
        Ok(Round::Unreachable(Error::new(e.kind(), format!("{} ({})", e.message(), failures.join("; ")))))
    }

    /// Wait (at most twice the per-master timeout) until this handle's requests so far on the
    /// masters in `which` are over.
    async fn settle_lanes(&self, lock: &Lock, which: &[bool]) {
        let mut tickets: Vec<Ticket> =
            lock.inner.lanes.iter().zip(which).filter(|&(_, w)| *w).map(|(l, _)| l.enter()).collect();
        let all = async {
            for t in &mut tickets {
                t.wait().await;
            }
        };
        let _ = tokio::time::timeout(self.timeout() * 2, all).await;
    }

    /// Raise the fence floor to `top` on the masters not in `skip` until `need` confirm; the
    /// masters that confirmed by then are marked in `confirmed`.
    ///
    /// Masters that granted this round get the write-back even if they lag (cleanup admission).
    /// It is not ordered before this owner's later release there (it may not even be sent when
    /// this returns, or be lost with its connection): a granted master that did not confirm gets
    /// `top` again from that release, before the hold is deleted (`Lane::owed`).
    async fn raise_fence(
        &self,
        lock: &Lock,
        top: u64,
        skip: &[usize],
        granted: &[usize],
        need: usize,
        confirmed: &mut [bool],
    ) -> bool {
        let inner = &lock.inner;
        let fence = top.to_string();
        let class = |i: usize| if granted.contains(&i) { Class::Cleanup } else { Class::New };
        let mut round = self.fan_out(&class, None, |i, mut conn| {
            let mut inv = scripts::RAISE_FENCE.key(&inner.keys.hold);
            inv.key(&inner.keys.fence)
                .arg(&*inner.token)
                .arg(&fence)
                .arg(timing::millis(self.opts.fence_retention));
            let skipped = skip.contains(&i);
            async move {
                if skipped {
                    return Ok(false);
                }
                inv.invoke_async::<Value>(&mut conn).await.map(|_| true)
            }
        });
        let writable = self.n() - skip.len();
        let (mut ok, mut failed) = (0, 0);
        while let Some((i, r)) = round.next().await {
            match r {
                Reply::Ok(true) => {
                    ok += 1;
                    confirmed[i] = true;
                }
                _ if skip.contains(&i) => {}
                _ => failed += 1,
            }
            if ok >= need {
                return true;
            }
            if writable - failed < need {
                return false;
            }
        }
        ok >= need
    }

    /// Acquire with waiting: release messages from any master, the smallest holder PTTL, or a
    /// random jitter after a split vote or an unreachable quorum; bounded by `deadline`.
    /// `last`, when given, notes each round's outcome: the error of a round that could not
    /// reach a quorum, `None` otherwise (the caller's cancellation quotes it).
    pub async fn acquire(
        self: Arc<Self>,
        lock: &Lock,
        deadline: Option<Instant>,
        last: Option<&std::sync::Mutex<Option<Error>>>,
    ) -> Result<Guard> {
        let channel = &lock.inner.keys.channel;
        let mut subs: Vec<Subscription> =
            self.nodes.iter().filter_map(|n| n.notifier.peek_all(channel)).collect();
        let mut subscribed = false;
        let mut backoff = Duration::from_millis(10);
        loop {
            for s in &mut subs {
                s.mark();
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let bound = |d: Duration| left.map_or(d, |l| l.min(d));
            let round = self.clone().attempt(lock, deadline).await?;
            if let Some(last) = last {
                *last.lock().unwrap_or_else(|p| p.into_inner()) = match &round {
                    Round::Unreachable(e) => Some(e.clone()),
                    _ => None,
                };
            }
            // Granted too late to be valid: a wait that ends after this round says so.
            let expired = matches!(round, Round::Expired);
            match round {
                Round::Granted(g) => return Ok(g),
                Round::Superseded => continue,
                // The round used up the validity: the masters are slow against the TTL. Spread
                // the retries instead of spinning.
                Round::Expired => tokio::time::sleep(bound(jitter(self.opts.redlock_retry_jitter))).await,
                Round::Held { pttl } => {
                    if left == Some(Duration::ZERO) {
                        return Err(lock.timed_out());
                    }
                    if !subscribed {
                        // Subscribe, then try again at once (a release in between is not missed).
                        subscribed = true;
                        subs = self.subscribe_all(lock, channel).await;
                        continue;
                    }
                    let wait = bound(pttl.map_or(Duration::from_secs(1), |p| Duration::from_millis(p + 1)));
                    tokio::select! {
                        _ = any_changed(&mut subs) => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
                Round::Split { pttl } => {
                    if left == Some(Duration::ZERO) {
                        return Err(lock.timed_out());
                    }
                    let mut wait = jitter(self.opts.redlock_retry_jitter);
                    if let Some(p) = pttl {
                        wait = wait.min(Duration::from_millis(p + 1));
                    }
                    tokio::time::sleep(bound(wait)).await;
                }
                Round::Unreachable(e) => {
                    if left == Some(Duration::ZERO) || deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(e);
                    }
                    tracing::debug!("ferrolock: redlock retry: {e}");
                    tokio::time::sleep(bound(backoff + jitter(self.opts.redlock_retry_jitter))).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(e);
                    }
                    continue;
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                if expired {
                    return Err(Error::new(
                        ErrorKind::AcquireTimeout,
                        "the wait elapsed; the last quorum granted too late for the lease to be valid \
                         (the masters answer slower than the TTL allows)",
                    ));
                }
                return Err(lock.timed_out());
            }
        }
    }

    async fn subscribe_all(&self, lock: &Lock, channel: &[u8]) -> Vec<Subscription> {
        let mut tasks = Vec::new();
        for node in &self.nodes {
            if node.stalled.load(Ordering::Acquire) {
                continue;
            }
            let Some(conn) = node.conn() else { continue };
            let (node, channel, timeout) = (node.clone(), channel.to_vec(), self.timeout());
            let secrets = lock.inner.client.inner_secrets();
            tasks.push(tokio::spawn(async move {
                let redact = move |s: String| redact_secrets(&secrets, s);
                let sub = node.notifier.subscribe_all(&conn, &channel, &redact);
                tokio::time::timeout(timeout, sub).await.ok().and_then(|r| r.ok())
            }));
        }
        let mut subs = Vec::new();
        for t in tasks {
            if let Ok(Some(s)) = t.await {
                subs.push(s);
            }
        }
        subs
    }

    // ---- release, extend, renewal ----

    /// Set this token's count to `target` on every master (0: compare-and-delete and publish).
    /// Returns `target`, or -1 when a majority says this token does not hold the lock. `fence`:
    /// the hold's fence, to tell a release whose first try ran unseen from a lost hold.
    pub async fn release(self: Arc<Self>, lock: &Lock, target: u32, fence: Option<u64>) -> Result<i64> {
        let inner = &lock.inner;
        let t0 = Instant::now();
        // A lagging (stopped, slow) master gets one full release per handle after its last
        // acquire there, not one per call: the rest would only pile up and run late.
        let class = |i: usize| {
            if target == 0 && self.nodes[i].lagging() && inner.lanes[i].touched.covered() {
                Class::Shed
            } else {
                Class::Cleanup
            }
        };
        // A release whose reply may go unseen must not be an EVALSHA (see `release_eval`): one to
        // a master lagging when its turn in the lane comes is sent as EVAL; one to a healthy
        // master that does not answer within 3/4 of the per-master timeout is followed, in the
        // same lane slot (so nothing of this handle runs in between; the release is idempotent),
        // by the same release as EVAL. Both are decided at the turn, not when the release is
        // issued: behind an acquire that timed out, the master is known to lag by then.
        // That EVAL runs after the EVALSHA, so when the EVALSHA deleted the hold (its reply
        // unseen) the EVAL finds nothing: at count 0 that master then counts as released if its
        // fence counter still holds the hold's fence (nobody was granted there since: the
        // counter holds it where the grant returned it or the write-back reached), not as "not
        // the owner". Elsewhere the check fails: a possible false LOST, never a missed one.
        let patience = self.timeout() * 3 / 4;
        let mut round = self.fan_out(&class, Some(&inner.lanes), |i, mut conn| {
            let mut inv = scripts::RELEASE.key(&inner.keys.hold);
            inv.arg(&*inner.token).arg(&inner.keys.channel).arg(target);
            let eval = release_eval(&inner.keys.hold, &inner.token, &inner.keys.channel, target);
            // The hold's token, owed to this master (`Lane::owed`): raised there before the hold
            // is deleted, in this slot; the release is not sent unless the raise answered.
            let owed = match inner.lanes[i].owed.load(Ordering::Acquire) {
                0 => None,
                _ if target > 0 => None,
                t => Some(raise_eval(
                    &inner.keys.hold,
                    &inner.keys.fence,
                    &inner.token,
                    t,
                    timing::millis(self.opts.fence_retention),
                )),
            };
            let fence_key = inner.keys.fence.clone();
            let node = self.nodes[i].clone();
            let touched = inner.lanes[i].touched.clone();
            let generation = touched.now();
            if target == 0 {
                touched.queue(generation);
            }
            async move {
                if target == 0 {
                    // Every acquire of this handle that reached the master is already followed
                    // by a full release (acquires that gave up in the lane never went out):
                    // nothing of this hold can be there.
                    if touched.released_since_sent() {
                        return Ok(None);
                    }
                    if let Some(raise) = owed {
                        raise.query_async::<Value>(&mut conn).await?;
                    }
                    touched.released(generation);
                }
                let r = if node.lagging() {
                    eval.query_async::<i64>(&mut conn).await?
                } else {
                    match tokio::time::timeout(patience, inv.invoke_async::<i64>(&mut conn)).await {
                        Ok(r) => r?,
                        Err(_) => {
                            let r = eval.query_async::<i64>(&mut conn).await?;
                            let ran_unseen = match fence {
                                Some(f) if r < 0 && target == 0 => {
                                    no_grant_since(&mut conn, &fence_key, f).await
                                }
                                _ => false,
                            };
                            if ran_unseen { 0 } else { r }
                        }
                    }
                };
                if target == 0 || r < 0 {
                    touched.clear(generation); // nothing of ours queued before this is left there
                }
                Ok(Some(r))
            }
        });
        let (mut ok, mut not_owner, mut got) = (0usize, 0usize, 0usize);
        let mut quorum_at: Option<Duration> = None;
        let mut first_err = None;
        let mut skipped = 0usize;
        loop {
            // Once a quorum confirmed, stragglers get as long again as the quorum took.
            let next = match quorum_at {
                None => round.next().await,
                Some(q) => {
                    let grace = (q * 2).max(Duration::from_millis(2)).saturating_sub(t0.elapsed());
                    tokio::time::timeout(grace, round.next()).await.ok().flatten()
                }
            };
            let Some((_, r)) = next else { break };
            got += 1;
            match r {
                Reply::Ok(Some(v)) if v >= 0 => ok += 1,
                Reply::Ok(Some(_)) => not_owner += 1,
                Reply::Err(e) => {
                    first_err.get_or_insert(e);
                }
                Reply::Ok(None) | Reply::Skipped => skipped += 1,
            }
            // Masters no acquire of this handle reached do not hold it either.
            if not_owner + skipped > self.n() - self.quorum {
                return Ok(-1);
            }
            if ok >= self.quorum && quorum_at.is_none() {
                quorum_at = Some(t0.elapsed());
            }
            if got == self.n() {
                break;
            }
        }
        if ok > 0 {
            return Ok(i64::from(target));
        }

        if not_owner > 0 && first_err.is_none() {
            return Ok(-1);
        }
        let why = first_err.map(|e| e.to_string()).unwrap_or_default();
        Err(self.unreachable(ok + not_owner, &format!("release confirmed by no master ({why})")))
    }

    /// A hold that more than `N − q` masters refused to renew (the watchdog marked it lost):
    /// delete it from the masters that still have it, which that renewal just extended. Under
    /// the handle's op lock, and only while the lost hold is still the handle's current one: a
    /// later grant of the same handle (same token) is never touched.
    pub(crate) async fn clear_refused(self: Arc<Self>, lock: Lock, hold: Arc<Hold>) {
        let _op = lock.inner.op.lock().await;
        if !lock.current().is_some_and(|h| Arc::ptr_eq(&h, &hold)) {
            return;
        }
        lock.give_up(&hold, "the masters no longer hold this owner's lock (renewal refused)");
        let _ = Box::pin(self.release(&lock, 0, Some(hold.fence))).await;
    }

    /// Extend by quorum: counts only if a quorum confirms before the current local deadline.
    pub async fn extend(self: Arc<Self>, lock: &Lock, hold: &Arc<Hold>, ttl: Duration) -> Result<()> {
        let inner = &lock.inner;
        let (_still, lease) = inner.client.inner.watchdog.lease_change(hold, ttl, &self.opts).await;
        let t_send = Instant::now();
        let mut round = self.fan_out(&|_| Class::New, None, |_, mut conn| {
            let mut inv = scripts::EXTEND.key(&inner.keys.hold);
            inv.arg(&*inner.token).arg(timing::millis(ttl));
            async move { inv.invoke_async::<i64>(&mut conn).await }
        });
        let (mut ok, mut not_owner, mut failed) = (0usize, 0usize, 0usize);
        let by = hold.deadline();
        let decided = tokio::time::timeout_at(by.into(), async {
            while let Some((_, r)) = round.next().await {
                match r {
                    Reply::Ok(1) => ok += 1,
                    Reply::Ok(_) => not_owner += 1,
                    _ => failed += 1,
                }
                if ok >= self.quorum
                    || not_owner > self.n() - self.quorum
                    || self.n() - not_owner - failed < self.quorum
                {
                    break;
                }
            }
        })
        .await;
        drop(round);
        if not_owner > self.n() - self.quorum {
            lock.give_up(hold, "extend: a majority of masters no longer holds this owner's lock");
            // The masters that still had it were just extended: clear them now (a release
            // after this finds the hold given up and sends nothing).
            let _ = Box::pin(self.clone().release(lock, 0, Some(hold.fence))).await;
            return Err(Error::new(ErrorKind::Lost, "the lock was lost before extend"));
        }
        if decided.is_ok() && ok >= self.quorum && !hold.is_final() {
            hold.leased(timing::deadline(&self.opts, t_send, lease), ttl);
            lock.inner.client.inner.watchdog.leased(hold);
            return Ok(());
        }
        if hold.is_final() {
            return Err(Error::new(
                ErrorKind::Lost,
                "the lease ran out before a quorum confirmed the extension",
            ));
        }
        // Undecided: a shorter lease may be in force on the masters that ran it.
        hold.lease_unknown(timing::deadline(&self.opts, t_send, ttl), ttl);
        lock.inner.client.inner.watchdog.leased(hold);
        hold.in_doubt();
        Err(self.unreachable(ok + not_owner, "extend"))
    }

    /// The watchdog's renewal by quorum: one pipeline per master, decided per hold.
    pub async fn renew_round(self: Arc<Self>, due: &[Due]) -> Vec<Outcome> {
        let ttls: Vec<u64> = due.iter().map(|d| timing::millis(d.ttl)).collect();
        let keys: Vec<(Arc<[u8]>, Arc<str>)> = due.iter().map(|d| (d.key.clone(), d.token.clone())).collect();
        let mut round = self.fan_out(&|_| Class::New, None, |_, mut conn| {
            let (keys, ttls) = (keys.clone(), ttls.clone());
            async move {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for ((key, token), ttl) in keys.iter().zip(&ttls) {
                    pipe.cmd("EVALSHA")
                        .arg(scripts::EXTEND.get_hash())
                        .arg(1)
                        .arg(&**key)
                        .arg(&**token)
                        .arg(*ttl);
                }
                let mut r: Vec<redis::RedisResult<i64>> = pipe.query_async(&mut conn).await?;
                if r.iter().any(|x| x.as_ref().is_err_and(scripts::is_noscript)) {
                    scripts::EXTEND.prepare_invoke().load_async(&mut conn).await?;
                    r = pipe.query_async(&mut conn).await?;
                }
                Ok(r.into_iter().map(|x| x.ok()).collect::<Vec<Option<i64>>>())
            }
        });
        let m = due.len();
        let (mut ok, mut no, mut failed) = (vec![0usize; m], vec![0usize; m], vec![0usize; m]);
        let (n, q) = (self.n(), self.quorum);
        let decided = |ok: &[usize], no: &[usize], failed: &[usize], j: usize| {
            ok[j] >= q || no[j] > n - q || n - no[j] - failed[j] < q
        };
        while let Some((_, r)) = round.next().await {
            for j in 0..m {
                match &r {
                    Reply::Ok(v) => match v.get(j).copied().flatten() {
                        Some(1) => ok[j] += 1,
                        Some(_) => no[j] += 1,
                        None => failed[j] += 1,
                    },
                    _ => failed[j] += 1,
                }
            }
            if (0..m).all(|j| decided(&ok, &no, &failed, j)) {
                break;
            }
        }
        (0..m)
            .map(|j| {
                if ok[j] >= q {
                    Outcome::Renewed
                } else if no[j] > n - q {
                    Outcome::Refused
                } else {
                    Outcome::Failed
                }
            })
            .collect()
    }

    // ---- administration ----

    async fn inspect_all(&self, keys: &Keys) -> Result<Vec<Value>> {
        let mut round = self.fan_out(&|_| Class::New, None, |_, mut conn| {
            let mut inv = scripts::INSPECT.key(&keys.hold);
            inv.key(&keys.fence);
            async move { inv.invoke_async::<Value>(&mut conn).await }
        });
        let mut out = Vec::new();
        let mut first_err = None;
        while let Some((_, r)) = round.next().await {
            match r {
                Reply::Ok(v) => out.push(v),
                Reply::Err(e) => {
                    first_err.get_or_insert(e);
                }
                Reply::Skipped => {}
            }
        }
        if out.len() < self.quorum {
            if let Some(e) = first_err.filter(|e| !e.kind().is_transient()) {
                return Err(e);
            }
            return Err(self.unreachable(out.len(), "inspect"));
        }
        Ok(out)
    }

    pub async fn inspect(&self, keys: &Keys, _client: &Client) -> Result<Option<LockInfo>> {
        let replies = self.inspect_all(keys).await?;
        let mut holds: Vec<LockInfo> = Vec::new();
        for v in &replies {
            let items = as_array(v)?;
            if int_at(items, 0)? == 0 {
                continue;
            }
            let pttl = int_at(items, 4)?;
            holds.push(LockInfo {
                owner: bytes_at(items, 1)?,
                count: parse_num(items, 2)?,
                fence: parse_num(items, 3)?,
                ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            });
        }
        for h in &holds {
            let same: Vec<&LockInfo> = holds.iter().filter(|o| o.owner == h.owner).collect();
            if same.len() >= self.quorum {
                // The hold's fence is the one most masters record (stragglers that granted
                // after the quorum decided carry their own, larger values).
                let fence = same
                    .iter()
                    .map(|o| o.fence)
                    .max_by_key(|f| (same.iter().filter(|o| o.fence == *f).count(), *f))
                    .unwrap_or(0);
                return Ok(Some(LockInfo {
                    owner: h.owner.clone(),
                    count: same.iter().map(|o| o.count).min().unwrap_or(0),
                    fence,
                    ttl: same.iter().map(|o| o.ttl).min().flatten(),
                }));
            }
        }
        Ok(None)
    }

    pub async fn last_fence(&self, keys: &Keys, _client: &Client) -> Result<Option<u64>> {
        let replies = self.inspect_all(keys).await?;
        let mut best = None;
        for v in &replies {
            let items = as_array(v)?;
            if !matches!(items.get(5), Some(Value::Nil) | None) {
                let f: u64 = parse_num(items, 5)?;
                best = Some(best.map_or(f, |b: u64| b.max(f)));
            }
        }
        Ok(best)
    }

    pub async fn force_unlock(&self, keys: &Keys, _client: &Client) -> Result<Option<LockInfo>> {
        let mut round = self.fan_out(&|_| Class::Cleanup, None, |_, mut conn| {
            let mut inv = scripts::FORCE_UNLOCK.key(&keys.hold);
            inv.arg(&keys.channel);
            async move { inv.invoke_async::<Value>(&mut conn).await }
        });
        let (mut answered, mut best): (usize, Option<LockInfo>) = (0, None);
        while let Some((_, r)) = round.next().await {
            let Reply::Ok(v) = r else { continue };
            answered += 1;
            let items = as_array(&v)?;
            if int_at(items, 0)? == 0 {
                continue;
            }
            let info = LockInfo::removed(items);
            if best.as_ref().is_none_or(|b| info.fence > b.fence) {
                best = Some(info);
            }
        }
        if answered < self.quorum {
            return Err(self.unreachable(answered, "force-unlock (the masters that answered were cleared)"));
        }
        Ok(best)
    }
}

/// One master's part of an acquire round: the request, then (after the round's verdict) the undo
/// if the round failed, all in this handle's lane to that master.
struct AcquireTask {
    i: usize,
    node: Arc<Node>,
    lane: Ticket,
    inflight: Inflight,
    slot: Arc<Slot>,
    verdict: watch::Receiver<Verdict>,
    tx: mpsc::UnboundedSender<(usize, Reply<AcqReply>)>,
    prior: u32,
    timeout: Duration,
    cap: usize,
    keys: (Vec<u8>, Vec<u8>),
    token: Arc<str>,
    touched: (Arc<Touch>, u64),
}

impl AcquireTask {
    async fn run(self, mut conn: Conn, inv: redis::ScriptInvocation<'static>) {
        let AcquireTask {
            i,
            node,
            mut lane,
            inflight,
            slot,
            mut verdict,
            tx,
            prior,
            timeout,
            cap,
            keys,
            token,
            touched,
        } = self;
        let mut sent = false;
        let request = async {
            lane.wait().await;
            sent = true;
            touched.0.sent(touched.1);
            inv.invoke_async::<Value>(&mut conn).await
        };
        let reply = match tokio::time::timeout(timeout, request).await {
            Ok(Ok(v)) => parse_acquire(&v),
            Ok(Err(e)) => Reply::Err(node.error(&e)),
            Err(_) => {
                node.stall(timeout);
                Reply::Err(Error::new(ErrorKind::Timeout, "the master did not answer in time"))
            }
        };
        drop(inflight);
        if !sent {
            lane.wait().await; // never sent; still keep the lane's order for whoever is next
        }
        let surely_not_granted =
            matches!(reply, Reply::Ok(AcqReply::Held { .. } | AcqReply::Limit | AcqReply::Gone));
        let _ = tx.send((i, reply));
        drop(tx);
        // The round's verdict; a dropped round (cancelled acquire) means undo.
        let v = loop {
            let v = *verdict.borrow_and_update();
            if v != Verdict::Pending {
                break v;
            }
            if verdict.changed().await.is_err() {
                break Verdict::Undo(prior);
            }
        };
        // A request that timed out waiting for its lane was never sent: nothing to undo.
        if let Verdict::Undo(target) = v
            && !surely_not_granted
            && sent
            && let Some((mut conn, inflight)) = node.admit(Class::Cleanup, cap)
        {
            // Sent as EVAL (never NOSCRIPT): it may run long after this task stopped waiting.
            if target == 0 {
                touched.0.released(touched.1);
            }
            let cmd = release_eval(&keys.0, &token, &keys.1, target);
            match tokio::time::timeout(timeout, cmd.query_async::<i64>(&mut conn)).await {
                Ok(Ok(r)) if target == 0 || r < 0 => touched.0.clear(touched.1),
                Ok(_) => {}
                Err(_) => node.stall(timeout),
            }
            drop(inflight);
        }
        slot.done();
        drop(lane);
    }
}

/// How far ahead of this client's clock a round's fence floor is: further than the clock
/// offsets between the client and its masters, so that every master of a quorum takes it.
const FLOOR_LEAD: Duration = Duration::from_secs(1);

/// The fence floor of one acquire round (`acquire.lua`'s ARGV[6], decimal microseconds): the
/// same for every master, so that fresh grants agree on one fence and the round needs no
/// write-back (`raise_fence.lua`). The fencing rule still decides: a master whose counter or
/// clock is past the floor grants more, and then the largest value is written back as before.
fn fence_floor() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (now + FLOOR_LEAD).as_micros().to_string()
}

/// `release.lua` as `EVAL` with the script text, for a release or undo whose reply may never be
/// seen: it may be queued on a stopped master behind a request that timed out, and by the time
/// it runs nobody waits for it any more. Sent as `EVALSHA`, a `NOSCRIPT` reply there (the script
/// not cached on that master, e.g. after a restart, while `acquire.lua` is) would go unnoticed,
/// nobody would follow it with `SCRIPT LOAD`, and the hold it was meant to undo would stay.
fn release_eval(hold: &[u8], token: &str, channel: &[u8], target: u32) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(scripts::RELEASE_SOURCE).arg(1).arg(hold).arg(token).arg(channel).arg(target);
    cmd
}

/// `raise_fence.lua` as `EVAL`: the write-back of `fence` that a full release sends first where
/// it is owed (`Lane::owed`).
fn raise_eval(hold: &[u8], fence_key: &[u8], token: &str, fence: u64, retention_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(scripts::RAISE_FENCE_SOURCE)
        .arg(2)
        .arg(hold)
        .arg(fence_key)
        .arg(token)
        .arg(fence.to_string())
        .arg(retention_ms);
    cmd
}

fn parse_acquire(v: &Value) -> Reply<AcqReply> {
    let parse = || -> Result<AcqReply> {
        let items = as_array(v)?;
        Ok(match int_at(items, 0)? {
            0 => AcqReply::Held { pttl: int_at(items, 1)? },
            1 => AcqReply::Granted { fence: parse_num(items, 1)? },
            2 => AcqReply::Limit,
            3 => AcqReply::Gone,
            _ => return Err(Error::new(ErrorKind::Protocol, "unknown acquire status")),
        })
    };
    match parse() {
        Ok(r) => Reply::Ok(r),
        Err(e) => Reply::Err(e),
    }
}

fn start_node(node: &Arc<Node>, conn: ConnectionManager, opts: &Arc<ClientOptions>) {
    tokio::spawn(Notifier::sweep(
        Arc::downgrade(&node.notifier),
        conn.clone(),
        opts.subscription_linger,
        Some(opts.redlock_node_timeout.max(opts.response_timeout)),
    ));
    let _ = node.conn.set(Conn::Direct(conn, None));
}

/// Keep trying a master that could not be reached at connect time.
async fn reconnect(node: Weak<Node>, target: Target, opts: Arc<ClientOptions>) {
    let mut pause = Duration::from_millis(100);
    loop {
        tokio::time::sleep(pause).await;
        let Some(n) = node.upgrade() else { return };
        if let Ok(conn) = target.manager(&opts, NO_RESPONSE_TIMEOUT, &n.notifier).await {
            start_node(&n, conn, &opts);
            tracing::info!(master = %n.addr, "ferrolock: redlock master connected");
            return;
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// Resolves when any of `subs` saw a release (never, if `subs` is empty).
async fn any_changed(subs: &mut [Subscription]) {
    let mut futs: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = subs
        .iter_mut()
        .map(|s| Box::pin(s.changed()) as Pin<Box<dyn Future<Output = ()> + Send + '_>>)
        .collect();
    std::future::poll_fn(|cx| {
        for f in &mut futs {
            if f.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await
}

/// A uniformly random duration in `[0, max]`.
fn jitter(max: Duration) -> Duration {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() || max.is_zero() {
        return max / 2;
    }
    let r = u64::from_le_bytes(b);
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(r % nanos.saturating_add(1))
}
