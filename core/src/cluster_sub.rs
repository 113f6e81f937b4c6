//! Release notifications on Redis Cluster by sharded pub/sub (docs/GUARANTEES.md, Redis Cluster).
//!
//! The scripts `SPUBLISH` a release on the node that serves the lock's slot (the channel shares
//! the lock's hash tag, so it has the same slot) and waiters `SSUBSCRIBE` there. The subscriptions
//! do **not** use the cluster connection of the scripts, nor redis's cluster pub/sub: when a slot
//! moves or its master fails over, Redis sends each sharded subscriber of that slot an
//! unsolicited `sunsubscribe` push, and redis 1.8.1 takes a reply-like push as the reply to the
//! oldest command pending on that connection. Here each node has a dedicated RESP3 connection
//! that carries only `SSUBSCRIBE`/`SUNSUBSCRIBE` (one channel each, serialised per node, each
//! reply checked to be that command's own confirmation), so a misrouted push can at worst
//! complete one of those early, never a lock command's reply.
//!
//! Every push of those connections reaches [`ShardedSubs`]: `smessage` wakes waiters (notify.rs),
//! an unsolicited `sunsubscribe` or a lost connection starts a repair of the channels concerned:
//! find the slot's current master (`CLUSTER SLOTS` on the scripts' connection, then `MOVED`
//! replies), `SSUBSCRIBE` there, check that the node itself still names itself the slot's master
//! (a replica accepts `SSUBSCRIBE` silently), and only then wake the channel's waiters, so that
//! their next try runs after the new subscription is in place and no release between the loss
//! and the repair goes unnoticed. Until the repair is done a waiter is bounded by the holder's PTTL (DESIGN §5).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, PushInfo, PushKind, RedisError, RedisResult, Value};

use crate::notify::Notifier;
use crate::options::ClientOptions;

/// A dedicated subscriber connection to one node.
#[derive(Clone)]
struct Node {
    id: u64,
    conn: MultiplexedConnection,
    /// One subscription command at a time on this connection.
    ops: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct State {
    /// Subscriber connections by `host:port`.
    nodes: HashMap<String, Node>,
    /// The channels waiters want, and the node each is subscribed (or being subscribed) on.
    wanted: HashMap<Vec<u8>, String>,
    /// Channels whose subscription is being repaired.
    repairing: HashSet<Vec<u8>>,
    /// `CLUSTER SLOTS`, as (first slot, last slot, master `host:port`); dropped on any change.
    slots: Option<Vec<(u16, u16, String)>>,
}

/// Sharded release-channel subscriptions of one cluster client.
pub(crate) struct ShardedSubs {
    me: Weak<ShardedSubs>,
    notifier: Weak<Notifier>,
    /// The scripts' cluster connection, used here for `CLUSTER SLOTS` only.
    cmd: ClusterConnection,
    /// The first seed: credentials and TLS for every node connection.
    template: redis::ConnectionInfo,
    opts: Arc<ClientOptions>,
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Test knob: when off, a lost subscription is not repaired (waiters fall back to the PTTL).
    repair: AtomicBool,
    /// Test knob: while on, every (re)subscription waits after it has picked its node and
    /// before it connects there (widens the window of a sweep's SUNSUBSCRIBE racing a repair).
    pause: AtomicBool,
    /// Subscriptions waiting at that pause now.
    paused: std::sync::atomic::AtomicUsize,
    /// A check after a timed-out lock command is running ([`ShardedSubs::after_timeout`]), and
    /// when the last one started.
    checking: AtomicBool,
    last_check: Mutex<Option<std::time::Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn client_error(what: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::Client, what))
}

/// Most attempts at one subscription (each a `MOVED` hop, a stray reply or a reconnection).
const ATTEMPTS: usize = 5;

impl ShardedSubs {
    pub fn new(
        cmd: ClusterConnection,
        template: redis::ConnectionInfo,
        opts: Arc<ClientOptions>,
        notifier: &Arc<Notifier>,
    ) -> Arc<ShardedSubs> {
        let subs = Arc::new_cyclic(|me| ShardedSubs {
            me: me.clone(),
            notifier: Arc::downgrade(notifier),
            cmd,
            template,
            opts,
            state: Mutex::new(State::default()),
            next_id: AtomicU64::new(0),
            repair: AtomicBool::new(true),
            pause: AtomicBool::new(false),
            paused: std::sync::atomic::AtomicUsize::new(0),
            checking: AtomicBool::new(false),
            last_check: Mutex::new(None),
        });
        tokio::spawn(look_around(Arc::downgrade(&subs)));
        subs
    }

    /// Test knob (see [`crate::Client::set_cluster_resubscription`]).
    pub fn set_repair(&self, on: bool) {
        self.repair.store(on, Ordering::Relaxed);
    }

    /// Test knob (see [`crate::Client::set_cluster_subscribe_pause_for_tests`]).
    pub fn set_pause(&self, on: bool) {
        self.pause.store(on, Ordering::Relaxed);
    }

    /// Tests only: repairs in progress, and subscriptions waiting at the test pause.
    pub fn repairs(&self) -> (usize, usize) {
        (lock(&self.state).repairing.len(), self.paused.load(Ordering::Relaxed))
    }

    /// `SSUBSCRIBE channel` on the master of its slot.
    pub async fn subscribe(&self, channel: &[u8]) -> RedisResult<()> {
        lock(&self.state).wanted.insert(channel.to_vec(), String::new());
        match self.subscribe_on_owner(channel).await {
            Ok(()) => Ok(()),
            Err(e) => {
                lock(&self.state).wanted.remove(channel);
                Err(e)
            }
        }
    }

    /// `SUNSUBSCRIBE channel` where it is subscribed.
    pub async fn unsubscribe(&self, channel: &[u8]) -> RedisResult<()> {
        let node = {
            let mut st = lock(&self.state);
            let addr = st.wanted.remove(channel);
            addr.and_then(|a| st.nodes.get(&a).cloned())
        };
        let Some(node) = node else { return Ok(()) };
        let _op = node.ops.lock().await;
        let r: RedisResult<Value> =
            redis::cmd("SUNSUBSCRIBE").arg(channel).query_async(&mut node.conn.clone()).await;
        r.map(|_| ())
    }

    /// Subscribe `channel` (which must be in `wanted`) on its slot's master, following `MOVED`,
    /// and record where.
    async fn subscribe_on_owner(&self, channel: &[u8]) -> RedisResult<()> {
        let mut hint: Option<String> = None;
        let mut last = client_error("sharded subscription: no attempt");
        for attempt in 0..ATTEMPTS {
            let addr = match hint.take() {
                Some(a) => a,
                None => self.owner_of(channel, attempt > 0).await?,
            };
            {
                let mut st = lock(&self.state);
                match st.wanted.get_mut(channel) {
                    Some(at) => *at = addr.clone(),
                    None => return Ok(()), // unsubscribed meanwhile
                }
            }
            if self.pause.load(Ordering::Relaxed) {
                self.paused.fetch_add(1, Ordering::Relaxed);
                while self.pause.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                self.paused.fetch_sub(1, Ordering::Relaxed);
            }
            let node = match self.node(&addr).await {
                Ok(n) => n,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let _op = node.ops.lock().await;
            let r: RedisResult<Value> =
                redis::cmd("SSUBSCRIBE").arg(channel).query_async(&mut node.conn.clone()).await;
            match r {
                Ok(Value::Push { kind: PushKind::SSubscribe, data }) if matches!(data.first(), Some(Value::BulkString(c)) if c == channel) =>
                {
                    // A replica accepts SSUBSCRIBE for its master's slots (no MOVED), and its
                    // subscribers do not get the master's SPUBLISH: a stale slot map (the former
                    // master right after a failover) would leave the subscription there for good.
                    // So ask the node itself, after the subscription is in place: if it names
                    // itself master of the slot now, a later loss of the slot sends us a
                    // `sunsubscribe`; if it names another master, leave and go there.
                    match self.master_seen_by(&addr, channel).await {
                        Some(master) if master != addr => {
                            lock(&self.state).slots = None;
                            if let Some(at) = lock(&self.state).wanted.get_mut(channel) {
                                *at = master.clone(); // our SUNSUBSCRIBE is not a loss
                            }
                            let r: RedisResult<Value> = redis::cmd("SUNSUBSCRIBE")
                                .arg(channel)
                                .query_async(&mut node.conn.clone())
                                .await;
                            drop(r);
                            hint = Some(master);
                            last = client_error("sharded subscription: the node is not the slot's master");
                        }
                        // The master itself, or no answer: keep it (a wrong guess costs a wait
                        // bounded by the holder's PTTL, never a grant)...
                        _ => {
                            // ...if still wanted here. An unsubscribe (the sweep) between the
                            // check above and this SSUBSCRIBE (while a repair connected or
                            // waited for `ops`) sent its SUNSUBSCRIBE first, or nothing when
                            // the node had no connection: undo it, still holding `ops`, or it
                            // stays subscribed with nobody wanting it. An unsubscribe after
                            // this check queues behind `ops`; a subscribe after it sends its
                            // own SSUBSCRIBE after this one.
                            if lock(&self.state).wanted.get(channel).is_none_or(|a| *a != addr) {
                                let r: RedisResult<Value> = redis::cmd("SUNSUBSCRIBE")
                                    .arg(channel)
                                    .query_async(&mut node.conn.clone())
                                    .await;
                                drop(r);
                            }
                            return Ok(());
                        }
                    }
                    continue;
                }
                // Another command's confirmation or a stray push taken as this reply: try
                // again (SSUBSCRIBE is idempotent).
                Ok(_) => {
                    hint = Some(addr);
                    last = client_error("sharded subscription: unexpected confirmation");
                }
                Err(e) if e.code() == Some("MOVED") => {
                    lock(&self.state).slots = None;
                    hint = e.redirect_node().map(|(a, _)| a.to_owned());
                    last = e;
                }
                Err(e) if matches!(e.code(), Some("ASK" | "TRYAGAIN" | "CLUSTERDOWN")) => {
                    lock(&self.state).slots = None;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    last = e;
                }
                Err(e) if e.code().is_some() => return Err(e), // e.g. NOPERM
                Err(e) => {
                    // The connection is replaced; the other channels it carried are repaired
                    // (dropping it may end their subscriptions without a Disconnection push).
                    if e.is_unrecoverable_error() || e.is_connection_dropped() {
                        self.lost_node(&addr, node.id);
                    }
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// The `host:port` of the master serving `channel`'s slot.
    async fn owner_of(&self, channel: &[u8], refresh: bool) -> RedisResult<String> {
        let slot = key_slot(channel);
        if !refresh && let Some(found) = find_slot(lock(&self.state).slots.as_deref(), slot) {
            return Ok(found);
        }
        let v: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut self.cmd.clone()).await?;
        let table = parse_slots(&v);
        let found = find_slot(Some(&table), slot);
        lock(&self.state).slots = Some(table);
        found.ok_or_else(|| client_error("sharded subscription: no master serves the slot"))
    }

    /// The master of `channel`'s slot as the node at `addr` sees it (`CLUSTER SLOTS` sent to that
    /// node on the scripts' connection, never on a subscriber connection).
    async fn master_seen_by(&self, addr: &str, channel: &[u8]) -> Option<String> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let (host, port) = addr.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
        let v =
            self.cmd.clone().route_command(redis::cmd("CLUSTER").arg("SLOTS").clone(), route).await.ok()?;
        find_slot(Some(&parse_slots(&v)), key_slot(channel))
    }

    /// A client for the node at `addr`, with the first seed's credentials and TLS.
    fn target(&self, addr: &str) -> RedisResult<crate::client::Target> {
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| client_error("bad node address"))?;
        let port: u16 = port.parse().map_err(|_| client_error("bad node port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let conn_addr = match self.template.addr() {
            redis::ConnectionAddr::TcpTls { .. } => {
                redis::ConnectionAddr::TcpTls { host, port, insecure: false, tls_params: None }
            }
            _ => redis::ConnectionAddr::Tcp(host, port),
        };
        let info = self.template.clone().set_addr(conn_addr);
        crate::client::Target::from_info(info, &self.opts.tls)
            .map_err(|_| client_error("sharded subscription: unusable node address or TLS options"))
    }

    /// The subscriber connection to `addr`, opened if needed.
    async fn node(&self, addr: &str) -> RedisResult<Node> {
        if let Some(n) = lock(&self.state).nodes.get(addr) {
            return Ok(n.clone());
        }
        let target = self.target(addr)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (me, at) = (self.me.clone(), addr.to_owned());
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.opts.connect_timeout))
            .set_response_timeout(Some(self.opts.response_timeout))
            .set_push_sender(move |info: PushInfo| {
                if let Some(me) = me.upgrade() {
                    me.on_push(&at, id, info);
                }
                Ok::<(), ()>(())
            });
        let conn = target.client.get_multiplexed_async_connection_with_config(&config).await?;
        let node = Node { id, conn, ops: Arc::new(tokio::sync::Mutex::new(())) };
        let mut st = lock(&self.state);
        // Another task may have connected meanwhile: keep the first.
        Ok(st.nodes.entry(addr.to_owned()).or_insert(node).clone())
    }

    fn forget_node(&self, addr: &str, id: u64) {
        let mut st = lock(&self.state);
        if st.nodes.get(addr).is_some_and(|n| n.id == id) {
            st.nodes.remove(addr);
        }
    }

    /// A push from the subscriber connection `id` to `addr`. Must not block.
    fn on_push(&self, addr: &str, id: u64, info: PushInfo) {
        match info.kind {
            PushKind::SMessage | PushKind::Message => {
                if let Some(n) = self.notifier.upgrade() {
                    n.on_push(info);
                }
            }
            PushKind::SUnsubscribe => {
                // Ours (an idle channel's SUNSUBSCRIBE) is no longer in `wanted`; a channel still
                // wanted on this node lost its subscription (slot moved, failover).
                let Some(Value::BulkString(channel)) = info.data.first() else { return };
                if lock(&self.state).wanted.get(channel.as_slice()).is_some_and(|a| a == addr) {
                    self.start_repair(channel.clone(), addr);
                }
            }
            PushKind::Disconnection => self.lost_node(addr, id),
            _ => {}
        }
    }

    /// The subscriber connection `id` to `addr` is gone: forget it and repair its channels.
    fn lost_node(&self, addr: &str, id: u64) {
        self.forget_node(addr, id);
        let lost: Vec<Vec<u8>> =
            lock(&self.state).wanted.iter().filter(|(_, a)| *a == addr).map(|(c, _)| c.clone()).collect();
        for channel in lost {
            self.start_repair(channel, addr);
        }
    }

    /// A lock command for `key` timed out on the scripts' connection. redis's cluster driver
    /// rebuilds its slot map on `MOVED`, `READONLY` and lost connections, never on a timeout: a
    /// master that hangs with its connections open (SIGSTOP, a partition that drops packets)
    /// keeps its slots in the driver's map after the cluster promoted its replica, and every
    /// command for them times out until it returns. So check, in the background (one check at
    /// a time, at most one per 250 ms): when the cluster names a master for `key`'s slot that
    /// answers while the driver's route does not reach it, make the driver rebuild its map (a
    /// `MOVED` from another master), and move the slot's release subscription there.
    pub fn after_timeout(&self, key: &[u8]) {
        if !self.repair.load(Ordering::Relaxed) {
            return;
        }
        {
            let mut last = lock(&self.last_check);
            let now = std::time::Instant::now();
            if last.is_some_and(|t| now.duration_since(t) < Duration::from_millis(250))
                || self.checking.swap(true, Ordering::AcqRel)
            {
                return;
            }
            *last = Some(now);
        }
        let Some(me) = self.me.upgrade() else {
            self.checking.store(false, Ordering::Release);
            return;
        };
        let key = key.to_vec();
        tokio::spawn(async move {
            me.check_owner(Some(&key)).await;
            me.checking.store(false, Ordering::Release);
        });
    }

    /// Move every wanted subscription that is not on its slot's master (per `CLUSTER SLOTS`), and
    /// check the driver's route for `key` (else for the first such channel's lock), as after a
    /// timeout. A master that hangs with its connections open sends no `sunsubscribe` when its
    /// replica takes over: its subscriptions would stay there, their releases unheard, and a
    /// client only waiting sends no command that could time out (see [`look_around`]).
    async fn check_owner(&self, key: Option<&[u8]>) {
        use redis::cluster_routing::{
            MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
        };
        let bound = self.opts.response_timeout;
        let ask = |cmd: redis::Cmd, route: RoutingInfo| {
            let mut conn = self.cmd.clone();
            async move { tokio::time::timeout(bound, conn.route_command(cmd, route)).await.ok() }
        };
        let by_addr = |addr: &str| {
            let (host, port) = addr.rsplit_once(':')?;
            let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
            Some(RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port: port.parse().ok()? }))
        };
        let text = |v: Value| redis::from_redis_value::<String>(v).ok();
        // The cluster's account, from the first master that answers (a hung one never does).
        let all =
            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, Some(ResponsePolicy::OneSucceeded)));
        let Some(Ok(v)) = ask(redis::cmd("CLUSTER").arg("SLOTS").clone(), all).await else { return };
        let table = parse_ranges(&v);
        let owner_of = |slot: u16| table.iter().find(|r| (r.0..=r.1).contains(&slot)).map(|r| r.2.clone());
        let strays: Vec<(Vec<u8>, String)> = lock(&self.state)
            .wanted
            .iter()
            .filter(|(c, a)| !a.is_empty() && owner_of(key_slot(c)).is_some_and(|o| o != **a))
            .map(|(c, a)| (c.clone(), a.clone()))
            .collect();
        let stray_key = strays.first().and_then(|(c, _)| c.strip_suffix(b":released")).map(<[u8]>::to_vec);
        for (channel, from) in strays {
            self.start_repair(channel, &from);
        }
        let Some(key) = key.map(<[u8]>::to_vec).or(stray_key) else { return };
        let key = key.as_slice();
        let slot = key_slot(key);
        let Some((_, _, owner, Some(owner_id))) = table.iter().find(|r| (r.0..=r.1).contains(&slot)).cloned()
        else {
            return;
        };
        // The node the driver sends the slot's commands to.
        let routed = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
            key,
            SlotAddr::Master,
        )));
        let routed_id =
            ask(redis::cmd("CLUSTER").arg("MYID").clone(), routed).await.and_then(|r| r.ok()).and_then(text);
        if routed_id.as_deref() == Some(owner_id.as_str()) {
            return; // the driver's route is right: the timeout was the owner's own
        }
        // Does the owner answer, on a connection of its own? (Asked through the driver, an
        // owner it has no connection to would make it reconnect from the seeds, which waits
        // for a hung seed's connect timeout.)
        let probe = async {
            let target = self.target(&owner).ok()?;
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(bound))
                .set_response_timeout(Some(bound));
            let mut conn = target.client.get_multiplexed_async_connection_with_config(&config).await.ok()?;
            redis::cmd("CLUSTER").arg("MYID").query_async::<String>(&mut conn).await.ok()
        };
        if tokio::time::timeout(bound * 2, probe).await.ok().flatten().as_deref() != Some(owner_id.as_str()) {
            return; // not answering: still the hung master, or not reachable from here
        }
        tracing::info!("ferrolock: cluster slot {slot} is served by {owner} now; refreshing the slot map");
        // A master that does not serve the slot answers MOVED: the driver rebuilds its map.
        if let Some(route) = table.iter().find(|r| r.2 != owner).and_then(|r| by_addr(&r.2)) {
            let _ = ask(redis::cmd("EXISTS").arg(key).clone(), route).await;
        }
        // (The subscriptions that were on another node than their slot's master are moving
        // already, above.)
    }

    fn start_repair(&self, channel: Vec<u8>, from: &str) {
        if !self.repair.load(Ordering::Relaxed) {
            return;
        }
        {
            let mut st = lock(&self.state);
            st.slots = None;
            if !st.repairing.insert(channel.clone()) {
                return;
            }
        }
        let Some(me) = self.me.upgrade() else { return };
        tracing::debug!("ferrolock: sharded subscription lost on {from}; resubscribing");
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(50);
            loop {
                if me.notifier.upgrade().is_none() || !lock(&me.state).wanted.contains_key(&channel) {
                    break;
                }
                if me.subscribe_on_owner(&channel).await.is_ok() {
                    // Subscribed again: the waiters try now, after the subscription, so a
                    // release during the gap is seen by that try.
                    if let Some(n) = me.notifier.upgrade() {
                        n.wake_channel(&channel);
                    }
                    break;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            lock(&me.state).repairing.remove(&channel);
        });
    }
}

/// While channels are subscribed, look once a second (or once per response timeout, if longer)
/// whether each is on its slot's master ([`ShardedSubs::check_owner`]). Ends with the client.
async fn look_around(subs: Weak<ShardedSubs>) {
    let every = match subs.upgrade() {
        Some(s) => s.opts.response_timeout.max(Duration::from_secs(1)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(s) = subs.upgrade() else { return };
        if !s.repair.load(Ordering::Relaxed) || lock(&s.state).wanted.is_empty() {
            continue;
        }
        if s.checking.swap(true, Ordering::AcqRel) {
            continue; // a check after a timeout is running
        }
        s.check_owner(None).await;
        s.checking.store(false, Ordering::Release);
    }
}

/// `CLUSTER SLOTS` as (first, last, master `host:port`).
fn parse_slots(v: &Value) -> Vec<(u16, u16, String)> {
    parse_ranges(v).into_iter().map(|(first, last, addr, _)| (first, last, addr)).collect()
}

/// `CLUSTER SLOTS` as (first, last, master `host:port`, master node id).
fn parse_ranges(v: &Value) -> Vec<(u16, u16, String, Option<String>)> {
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut out = Vec::new();
    let Value::Array(ranges) = v else { return out };
    for r in ranges {
        let Value::Array(items) = r else { continue };
        let (Some(first), Some(last), Some(Value::Array(master))) =
            (items.first().and_then(int), items.get(1).and_then(int), items.get(2))
        else {
            continue;
        };
        let (Some(host), Some(port)) = (master.first().and_then(text), master.get(1).and_then(int)) else {
            continue;
        };
        if host.is_empty() || host == "?" {
            continue;
        }
        let host = if host.contains(':') { format!("[{host}]") } else { host };
        out.push((first, last, format!("{host}:{port}"), master.get(2).and_then(text)));
    }
    out
}

fn find_slot(table: Option<&[(u16, u16, String)]>, slot: u16) -> Option<String> {
    table?.iter().find(|(a, b, _)| (*a..=*b).contains(&slot)).map(|(_, _, m)| m.clone())
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the bytes between the first `{`
/// and the next `}`, when not empty) or of the whole key, modulo 16384.
fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar")); // an empty tag does not count
        assert_eq!(key_slot(b"ferrolock:{a}:released"), key_slot(b"ferrolock:{a}"));
    }
}
