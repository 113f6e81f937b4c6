//! The single-node client: one reconnecting RESP3 connection carrying commands and release
//! notifications, plus the watchdog scheduler and the subscription sweeper.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{ProtocolVersion, RedisResult, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::hot::HotConn;
use crate::keys::Keys;
use crate::lock::Lock;
use crate::notify::Notifier;
use crate::options::{ClientOptions, LockOptions, TlsOptions};
use crate::redlock::Quorum;
use crate::scripts;
use crate::sentinel::{SentinelConfig, SentinelConn};
use crate::watchdog::Watchdog;

/// A connection to one Redis server, shared by all locks made from it. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub backend: Backend,
    pub opts: Arc<ClientOptions>,
    pub watchdog: Watchdog,
    pub runtime: tokio::runtime::Handle,
    /// Direct clients over TCP or a Unix socket: the acquire and release scripts' own
    /// connection (hot.rs).
    pub hot: Option<HotConn>,
    secrets: Vec<String>,
    addr: String,
    /// `true` once [`Client::close`] ran: pending acquires end with `CLOSED`, new calls refuse.
    closed: std::sync::atomic::AtomicBool,
    /// Woken by [`Client::close`]: the waits of pending acquires listen on it.
    closing: tokio::sync::Notify,
}

/// Where a client's locks live: one server (given directly or found through Sentinel), or a
/// quorum of independent masters.
#[derive(Clone)]
pub(crate) enum Backend {
    Single { conn: Conn, notifier: Arc<Notifier> },
    Quorum(Arc<Quorum>),
}

impl Backend {
    /// Whether the locks live on a Redis Cluster (each lock's commands on its slot's master).
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        if let Backend::Single { conn: Conn::Cluster(_), .. } = self {
            return true;
        }
        false
    }
}

/// The single-server connection: a reconnecting connection to one address, or to whichever
/// server the sentinels name as master (rebuilt when that changes: `sentinel.rs`).
#[derive(Clone)]
pub(crate) enum Conn {
    /// With the bound of each request ([`bounded`]); `None` for a Redlock master, whose
    /// requests are bounded where they are sent.
    Direct(ConnectionManager, Option<Duration>),
    Sentinel(Arc<SentinelConn>),
    #[cfg(feature = "cluster")]
    Cluster(crate::cluster::ClusterConns),
}

// `refused_again`: the multiplexed connection (redis-rs `ConnectionManager`) reconnects only
// when a request comes. Once its short reconnect burst has failed (the server was down), it keeps
// that refusal and hands it to the next request even after the server is back, and only that
// failure starts a new connect. A refused connection means the request was never sent, so a
// request handed that stored refusal (at once, without waiting) is sent once more, on the
// connection that failure started (a renewal would otherwise fail seconds after the server came
// back, and could let the lease run out: watchdog audit). A refusal the request waited for is a
// burst that just failed: the server is down now, and a second burst would only double the
// wait (a refused try took two bursts, about 0.5 s).
impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Conn::Direct(m, bound) => Box::pin(bounded(*bound, async move {
                match waited(m.req_packed_command(cmd)).await {
                    // See `refused_again`.
                    (Err(e), false) if e.is_connection_refusal() => m.req_packed_command(cmd).await,
                    (r, _) => r,
                }
            })),
            Conn::Sentinel(s) => crate::sentinel::req_command(s, cmd),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => crate::cluster::req_command(c, cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Direct(m, bound) => Box::pin(bounded(*bound, async move {
                match waited(m.req_packed_commands(pipeline, offset, count)).await {
                    // See `refused_again`.
                    (Err(e), false) if e.is_connection_refusal() => {
                        m.req_packed_commands(pipeline, offset, count).await
                    }
                    (r, _) => r,
                }
            })),
            Conn::Sentinel(s) => crate::sentinel::req_commands(s, pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => crate::cluster::req_commands(c, pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Direct(m, _) => m.get_db(),
            Conn::Sentinel(s) => s.db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => 0,
        }
    }
}

/// `f`'s output, and whether it had to wait for it (was not ready when first polled).
async fn waited<F: Future>(f: F) -> (F::Output, bool) {
    let mut f = std::pin::pin!(f);
    let mut pending = false;
    let out = std::future::poll_fn(|cx| {
        let p = f.as_mut().poll(cx);
        pending |= p.is_pending();
        p
    })
    .await;
    (out, pending)
}

/// `f`, bounded by `bound` from the start: the wait for a connection being set up again counts
/// too. The connection's own response timeout starts once the request is sent, and its
/// reconnect burst is four connects of up to `connect_timeout` each: against a server whose new
/// connections were dropped unanswered (a firewall, a host gone), a request waited 8 s, and a
/// 500 ms `acquire(wait)` with its undo 24.6 s. Expiry is a timeout: the request may have gone
/// out once the connection was up, so its outcome is unknown.
pub(crate) async fn bounded<T>(
    bound: Option<Duration>,
    f: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    let Some(bound) = bound else { return f.await };
    match tokio::time::timeout(bound, f).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out").into()),
    }
}

impl Conn {
    /// Releases publish with `SPUBLISH` (sharded pub/sub) on a cluster, `PUBLISH` elsewhere
    /// (docs/PROTOCOL.md).
    pub(crate) fn sharded(&self) -> bool {
        match self {
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => true,
            _ => false,
        }
    }

    /// `e` says that the request never left this client: a refused connection (nothing listens
    /// at the address), so no undo is owed. A cluster connection may have sent the request to a
    /// node before a reconnect was refused, so it never says so.
    pub(crate) fn never_sent(&self, e: &redis::RedisError) -> bool {
        match self {
            Conn::Direct(..) | Conn::Sentinel(_) => e.is_connection_refusal(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => false,
        }
    }
}

/// A connection that carries release-channel subscriptions (notify.rs).
pub(crate) trait PubSubConn: Clone + Send + Sync + 'static {
    fn subscribe(&mut self, channel: &[u8]) -> impl Future<Output = RedisResult<()>> + Send;
    fn unsubscribe(&mut self, channel: &[u8]) -> impl Future<Output = RedisResult<()>> + Send;
}

impl PubSubConn for ConnectionManager {
    fn subscribe(&mut self, channel: &[u8]) -> impl Future<Output = RedisResult<()>> + Send {
        ConnectionManager::subscribe(self, channel.to_vec())
    }

    fn unsubscribe(&mut self, channel: &[u8]) -> impl Future<Output = RedisResult<()>> + Send {
        ConnectionManager::unsubscribe(self, channel.to_vec())
    }
}

impl PubSubConn for Conn {
    async fn subscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        match self {
            Conn::Direct(m, _) => m.subscribe(channel).await,
            Conn::Sentinel(s) => s.subscribe(channel).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.sub.subscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &[u8]) -> RedisResult<()> {
        match self {
            Conn::Direct(m, _) => m.unsubscribe(channel).await,
            Conn::Sentinel(s) => s.unsubscribe(channel).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.sub.unsubscribe(channel).await,
        }
    }
}

/// What [`Client::inspect`] and [`Client::force_unlock`] report about one lock.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The holder's owner token.
    pub owner: Vec<u8>,
    /// The holder's reentrancy depth.
    pub count: u32,
    /// The hold's fencing token.
    pub fence: u64,
    /// Server-side time to expiry (`None`: the hold has no expiry).
    pub ttl: Option<Duration>,
}

impl LockInfo {
    /// A hold as the inspect and force-unlock scripts report it: `{1, owner, count, fence,
    /// pttl, …}` (a force-unlock reply of a server-side script from before pttl was added has
    /// no fifth item: `ttl` is then `None`).
    pub(crate) fn from_reply(items: &[Value]) -> Result<LockInfo> {
        let pttl = if items.len() > 4 { int_at(items, 4)? } else { -1 };
        Ok(LockInfo {
            owner: bytes_at(items, 1)?,
            count: parse_num(items, 2)?,
            fence: parse_num(items, 3)?,
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        })
    }

    /// What a force-unlock removed. The script has deleted the key by the time its reply is
    /// read, so a hold whose count or fence is not a ferrolock number (a key written by
    /// something else) is reported, not refused: with 0 for what does not parse (a real hold's
    /// count and fence are at least 1).
    pub(crate) fn removed(items: &[Value]) -> LockInfo {
        let pttl = if items.len() > 4 { int_at(items, 4).unwrap_or(-1) } else { -1 };
        LockInfo {
            owner: bytes_at(items, 1).unwrap_or_default(),
            count: parse_num(items, 2).unwrap_or(0),
            fence: parse_num(items, 3).unwrap_or(0),
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        }
    }
}

impl Client {
    /// Connect to `url`: `redis://[user:password@]host[:port][/db]`, `rediss://` for TLS, or
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/master-name[/db]` to find the
    /// master through Sentinel and follow its failovers (credentials and db are the master's;
    /// the sentinels are asked without credentials), or `rediss+sentinel://…` for the same over
    /// TLS to the sentinels and the masters (`opts.tls` applies to both). With the `cluster`
    /// feature, `redis+cluster://[user:password@]host:port[,host:port…]` names seed nodes of a Redis
    /// Cluster, and `rediss+cluster://…` the same over TLS to every node (`opts.tls` applies).
    pub async fn connect(url: &str, opts: ClientOptions) -> Result<Client> {
        opts.validate()?;
        let notifier = Arc::new(Notifier::default());
        #[cfg(feature = "cluster")]
        let cluster = crate::cluster::is_cluster_url(url);
        #[cfg(not(feature = "cluster"))]
        let cluster = false;
        let mut hot = None;
        let (conn, secrets, addr, opts) = if cluster {
            Self::connect_cluster(url, opts, &notifier).await?
        } else if crate::sentinel::is_sentinel_url(url) {
            let cfg = SentinelConfig::parse(url, &opts)?;
            let (secrets, addr) = (cfg.secrets.clone(), cfg.describe());
            let opts = Arc::new(opts);
            let conn = SentinelConn::connect(cfg, opts.clone(), &notifier).await?;
            (Conn::Sentinel(conn), secrets, addr, opts)
        } else {
            let target = Target::parse(url, &opts.tls)?;
            let conn = target.manager(&opts, Some(opts.response_timeout), &notifier).await?;
            hot = HotConn::for_server(target.client.get_connection_info(), &opts);
            (Conn::Direct(conn, Some(opts.response_timeout)), target.secrets, target.addr, Arc::new(opts))
        };
        // Bounded: on a cluster the idle channels of a master that hangs are unsubscribed one
        // after another (each waits out a response timeout), and the sweep holds the lock that
        // every new waiter's subscription needs, whichever master its lock lives on.
        tokio::spawn(Notifier::sweep(
            Arc::downgrade(&notifier),
            conn.clone(),
            opts.subscription_linger,
            Some(opts.response_timeout),
        ));
        let backend = Backend::Single { conn, notifier };
        let watchdog = Watchdog::start(backend.clone(), opts.clone());
        Ok(Client {
            inner: Arc::new(ClientInner {
                backend,
                opts,
                watchdog,
                runtime: tokio::runtime::Handle::current(),
                hot,
                secrets,
                addr,
                closed: std::sync::atomic::AtomicBool::new(false),
                closing: tokio::sync::Notify::new(),
            }),
        })
    }

    /// Connect to N independent masters for Redlock (quorum locking). `lock()` then returns the
    /// same [`Lock`] type, whose every operation runs on a majority of the masters: see
    /// docs/REDLOCK.md for the algorithm and its assumptions.
    ///
    /// All URLs are checked before any I/O; `opts.redlock_*` set the quorum (default `N / 2 + 1`;
    /// an even `N` needs an explicit quorum), the per-master timeout and the retry jitter. Fails
    /// with [`ErrorKind::QuorumNotReached`] if fewer than a quorum of masters can be reached now;
    /// masters that cannot be reached yet are reconnected in the background.
    pub async fn connect_redlock<I>(urls: I, opts: ClientOptions) -> Result<Client>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        opts.validate()?;
        let targets = urls
            .into_iter()
            .map(|u| Self::redlock_master(u.as_ref(), &opts))
            .collect::<Result<Vec<Target>>>()?;
        let quorum_size = opts.validate_redlock(targets.len())?;
        // One server under two database numbers is one master too: a crash would count twice.
        let server = |t: &Target| t.addr.rsplit_once('/').map_or(t.addr.clone(), |(s, _)| s.to_owned());
        for (i, t) in targets.iter().enumerate() {
            if targets[..i].iter().any(|o| server(o) == server(t)) {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!("master {} is listed twice: a quorum needs independent masters", server(t)),
                ));
            }
        }
        let secrets: Vec<String> = targets.iter().flat_map(|t| t.secrets.iter().cloned()).collect();
        let addr = format!(
            "redlock({} of [{}])",
            quorum_size,
            targets.iter().map(|t| t.addr.as_str()).collect::<Vec<_>>().join(", ")
        );
        let opts = Arc::new(opts);
        let quorum = Quorum::connect(targets, quorum_size, opts.clone()).await?;
        let backend = Backend::Quorum(quorum);
        let watchdog = Watchdog::start(backend.clone(), opts.clone());
        Ok(Client {
            inner: Arc::new(ClientInner {
                backend,
                opts,
                watchdog,
                runtime: tokio::runtime::Handle::current(),
                hot: None,
                secrets,
                addr,
                closed: std::sync::atomic::AtomicBool::new(false),
                closing: tokio::sync::Notify::new(),
            }),
        })
    }

    /// One Redlock master: a single server's URL. A Sentinel or Cluster URL names a replicated
    /// deployment, which is one master for Redlock's purposes, not a list of them: say so rather
    /// than call the scheme unsupported.
    fn redlock_master(url: &str, opts: &ClientOptions) -> Result<Target> {
        let scheme = url.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase();
        if scheme.ends_with("+sentinel") || scheme.ends_with("+cluster") {
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                "a Redlock master is one server (redis://, rediss:// or redis+unix://); a redis+sentinel:// or \
                 redis+cluster:// URL names a replicated deployment, which takes a plain client, not Redlock",
            ));
        }
        Target::parse(url, &opts.tls)
    }

    #[cfg(feature = "cluster")]
    async fn connect_cluster(
        url: &str,
        opts: ClientOptions,
        notifier: &Arc<Notifier>,
    ) -> Result<(Conn, Vec<String>, String, Arc<ClientOptions>)> {
        // replica_acks works here too: each acquire and its WAIT go to the slot's master as one
        // pipeline (replicas.rs).
        let cfg = crate::cluster::ClusterConfig::parse(url, &opts)?;
        let conn = cfg.connect(&opts, notifier).await?;
        Ok((Conn::Cluster(conn), cfg.secrets, cfg.description, Arc::new(opts)))
    }

    #[cfg(not(feature = "cluster"))]
    async fn connect_cluster(
        _url: &str,
        _opts: ClientOptions,
        _notifier: &Arc<Notifier>,
    ) -> Result<(Conn, Vec<String>, String, Arc<ClientOptions>)> {
        Err(Error::new(ErrorKind::Internal, "cluster support is not compiled in"))
    }

    /// Tests only: on a Redis Cluster client, stop (`false`) or resume repairing the sharded
    /// subscriptions that a slot move or a failover ends (the control of the resubscription
    /// tests: waiters then fall back to the holder's PTTL). No effect elsewhere.
    #[doc(hidden)]
    pub fn set_cluster_resubscription_for_tests(&self, on: bool) {
        #[cfg(feature = "cluster")]
        if let Backend::Single { conn: Conn::Cluster(c), .. } = &self.inner.backend {
            c.sub.set_repair(on);
        }
        #[cfg(not(feature = "cluster"))]
        let _ = on;
    }

    /// Tests only: on a Redis Cluster client, hold (`true`) every sharded subscription and
    /// repair after it has picked its node and before it connects and subscribes there, until
    /// turned off again. No effect elsewhere.
    #[doc(hidden)]
    pub fn set_cluster_subscribe_pause_for_tests(&self, on: bool) {
        #[cfg(feature = "cluster")]
        if let Backend::Single { conn: Conn::Cluster(c), .. } = &self.inner.backend {
            c.sub.set_pause(on);
        }
        #[cfg(not(feature = "cluster"))]
        let _ = on;
    }

    /// Tests only: on a Redis Cluster client, how many sharded subscriptions are being repaired
    /// now, and how many subscriptions wait at the pause above ((0, 0) elsewhere).
    #[doc(hidden)]
    pub fn cluster_repairs_for_tests(&self) -> (usize, usize) {
        #[cfg(feature = "cluster")]
        if let Backend::Single { conn: Conn::Cluster(c), .. } = &self.inner.backend {
            return c.sub.repairs();
        }
        (0, 0)
    }

    /// Tests only: on a Sentinel client, hold (`true`) a master switch after it has listed the
    /// release channels to subscribe on the new master and before it subscribes them, until
    /// turned off again. No effect elsewhere.
    #[doc(hidden)]
    pub fn set_sentinel_switch_pause_for_tests(&self, on: bool) {
        if let Backend::Single { conn: Conn::Sentinel(s), .. } = &self.inner.backend {
            s.set_pause(on);
        }
    }

    /// Tests only: a master switch of this Sentinel client waits at the pause above.
    #[doc(hidden)]
    pub fn sentinel_switch_paused_for_tests(&self) -> bool {
        match &self.inner.backend {
            Backend::Single { conn: Conn::Sentinel(s), .. } => s.paused(),
            _ => false,
        }
    }

    /// Tests only: pause each renewal round of this client by `delay` before it is sent, and
    /// (`settle: false`) let releases go without waiting for a renewal already on its way (the
    /// control of the "no renewal after release" test). No effect on other clients.
    #[doc(hidden)]
    pub fn set_watchdog_test_knobs(&self, delay: Duration, settle: bool) {
        self.inner.watchdog.set_test_knobs(delay, settle);
    }

    /// Tests only: the sizes of this client's tables that grow with the lock names in use:
    /// release channels the notifier knows (summed over the masters of a Redlock client),
    /// holds the watchdog tracks, and its renewals in flight. All return to zero once nothing
    /// is held or waited on and the subscriptions' linger has passed.
    #[doc(hidden)]
    pub fn table_sizes_for_tests(&self) -> (usize, usize, usize) {
        let channels = match &self.inner.backend {
            Backend::Single { notifier, .. } => notifier.channel_count(),
            Backend::Quorum(q) => q.nodes.iter().map(|n| n.notifier.channel_count()).sum(),
        };
        let (entries, flying) = self.inner.watchdog.table_sizes();
        (channels, entries, flying)
    }

    /// Tests only: how many times this client's watchdog scheduler has run.
    #[doc(hidden)]
    pub fn watchdog_ticks_for_tests(&self) -> u64 {
        self.inner.watchdog.ticks()
    }

    /// Tests and benchmarks: stop (`false`) or resume sending acquires and releases on the
    /// hot-path connection (docs/CONNECTIONS.md); they then all go through the multiplexed
    /// connection. Returns whether this client has a hot-path connection at all.
    #[doc(hidden)]
    pub fn set_hot_path_for_tests(&self, on: bool) -> bool {
        self.inner.hot.as_ref().map(|h| h.set_enabled(on)).is_some()
    }

    /// Tests' controls only: on the hot-path connection, leave out the pins that keep a handle's
    /// requests in order (`pins: false`), or read replies without skipping those of abandoned
    /// requests (`skip_stale: false`). Both make the library unsafe.
    #[doc(hidden)]
    pub fn set_hot_path_test_knobs(&self, pins: bool, skip_stale: bool) {
        if let Some(h) = &self.inner.hot {
            h.set_test_knobs(pins, skip_stale);
        }
    }

    /// Close this client and everything made from it (docs/GUARANTEES.md, "Closing a client").
    /// Does no I/O and never blocks; idempotent; may be called from any thread, also from a
    /// loss callback.
    ///
    /// - Every acquire of its locks still waiting ends with [`ErrorKind::Closed`] at once (undone
    ///   as after a cancellation); one with a request in flight ends so when the reply comes (at
    ///   most `response_timeout`), and a grant it brings back is released.
    /// - Every live hold becomes [`LockState::Lost`](crate::LockState::Lost) at once (its loss
    ///   callbacks run) and is **not released**: the watchdog stops, no renewal is sent from
    ///   now on, and the lease runs out on the server (as for a crashed holder).
    /// - Later calls on the client, its locks and their guards (`lock`, `inspect`,
    ///   `force_unlock`, `acquire`, `try_acquire`, `release`, `extend`) fail with
    ///   [`ErrorKind::Closed`]; `state()` says `Lost` (or `Released` for a level released
    ///   before), `remaining()` zero.
    ///
    /// The connection itself closes when the last clone of the client, lock or guard is dropped.
    pub fn close(&self) {
        // The flag first: whoever is woken reads it set.
        if self.inner.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        self.inner.closing.notify_waiters();
        self.inner.watchdog.close(CLOSED_WHY);
    }

    /// Whether [`Client::close`] was called (on this client or any clone).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `Err(CLOSED)` once the client is closed.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_closed() { Err(closed_error()) } else { Ok(()) }
    }

    /// Resolves once the client is closed.
    pub(crate) async fn closing(&self) {
        let notified = self.inner.closing.notified();
        tokio::pin!(notified);
        // Registered before the flag is read: a close in between still wakes this waiter.
        notified.as_mut().enable();
        if !self.is_closed() {
            notified.await;
        }
    }

    /// Whether this client locks by quorum over several masters ([`Client::connect_redlock`]).
    pub fn is_redlock(&self) -> bool {
        matches!(self.inner.backend, Backend::Quorum(_))
    }

    /// Sentinel clients: the master in use now (`host:port`), as the sentinels last named it.
    pub fn sentinel_master(&self) -> Option<String> {
        match &self.inner.backend {
            Backend::Single { conn: Conn::Sentinel(s), .. } => Some(s.master_addr()),
            _ => None,
        }
    }

    /// A lock handle for `name` with a fresh owner token. Validates before any I/O.
    ///
    /// Re-entry works through the same handle (and its clones); another handle contends.
    pub fn lock(&self, name: impl AsRef<[u8]>, opts: LockOptions) -> Result<Lock> {
        self.check_open()?;
        Lock::new(self.clone(), name.as_ref(), opts)
    }

    /// The options this client was created with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.opts
    }

    /// The keys of lock `name`, refusing a name their hash tag cannot keep in one slot.
    pub(crate) fn keys(&self, name: &[u8]) -> Result<Keys> {
        let keys = Keys::new(&self.inner.opts, name)?;
        #[cfg(feature = "cluster")]
        if name.first() == Some(&b'}')
            && matches!(&self.inner.backend, Backend::Single { conn: Conn::Cluster(_), .. })
        {
            // `<prefix>{}…`: an empty hash tag, so Redis Cluster hashes each whole key and the
            // lock's keys land in different slots (the scripts would fail with CROSSSLOT).
            return Err(Error::new(
                ErrorKind::InvalidName,
                "on Redis Cluster a lock name must not start with '}' (its keys would hash to different slots)",
            ));
        }
        Ok(keys)
    }

    /// Who holds `name`, if anyone (one read-only script call).
    ///
    /// Redlock: the holder that a quorum of masters agrees on (count and TTL from the weakest of
    /// them, the fence most of them record); `None` if no owner has a quorum.
    pub async fn inspect(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        self.check_open()?;
        let keys = self.keys(name.as_ref())?;
        let conn = match &self.inner.backend {
            Backend::Single { conn, .. } => conn,
            Backend::Quorum(q) => return q.inspect(&keys, self).await,
        };
        let v = self.run_inspect(conn, &keys).await?;
        let items = as_array(&v)?;
        if int_at(items, 0)? == 0 {
            return Ok(None);
        }
        LockInfo::from_reply(items).map(Some)
    }

    /// The last fencing token granted for `name`, while it is retained (`None` after expiry).
    /// Redlock: the largest value among the masters that answer (a quorum must answer).
    pub async fn last_fence(&self, name: impl AsRef<[u8]>) -> Result<Option<u64>> {
        self.check_open()?;
        let keys = self.keys(name.as_ref())?;
        let conn = match &self.inner.backend {
            Backend::Single { conn, .. } => conn,
            Backend::Quorum(q) => return q.last_fence(&keys, self).await,
        };
        let v = self.run_inspect(conn, &keys).await?;
        let items = as_array(&v)?;
        match items.get(5) {
            Some(Value::Nil) | None => Ok(None),
            Some(_) => parse_num(items, 5).map(Some),
        }
    }

    /// The read-only inspect script on one server: `{held, owner, count, fence, pttl, last fence}`.
    async fn run_inspect(&self, conn: &Conn, keys: &Keys) -> Result<Value> {
        scripts::INSPECT
            .key(&keys.hold)
            .key(&keys.fence)
            .invoke_async(&mut conn.clone())
            .await
            .map_err(|e| self.error(&e))
    }

    /// Administrative release: delete whatever hold `name` has and wake its waiters.
    /// Returns what was removed. The former holder finds out at its next renewal (LOST). A hash
    /// under the name whose count or fence is no ferrolock number is removed too, and reported
    /// with 0 for them.
    ///
    /// Redlock: deletes the hold on every master that answers and reports the largest-fence hold
    /// removed.
    pub async fn force_unlock(&self, name: impl AsRef<[u8]>) -> Result<Option<LockInfo>> {
        self.check_open()?;
        let keys = self.keys(name.as_ref())?;
        let conn = match &self.inner.backend {
            Backend::Single { conn, .. } => conn,
            Backend::Quorum(q) => return q.force_unlock(&keys, self).await,
        };
        // With the fair keys: waiters queued in fair mode get the lock in order, as from a release.
        let mut script = scripts::FORCE_UNLOCK.key(&keys.hold);
        script.key(&keys.fence).key(&keys.queue).key(&keys.waiters);
        script.arg(&keys.channel).arg(if conn.sharded() { "sharded" } else { "" });
        script.arg(crate::timing::millis(self.inner.opts.fence_retention));
        let v: Value = script.invoke_async(&mut conn.clone()).await.map_err(|e| self.error(&e))?;
        let items = as_array(&v)?;
        if int_at(items, 0)? == 0 {
            return Ok(None);
        }
        Ok(Some(LockInfo::removed(items)))
    }

    /// Single node: whether waiters of this client listen on `channel` (it is subscribed).
    pub(crate) fn waited_on(&self, channel: &[u8]) -> bool {
        match &self.inner.backend {
            Backend::Single { notifier, .. } => notifier.is_subscribed(channel),
            Backend::Quorum(_) => false,
        }
    }

    /// A driver error as a ferrolock error, with secrets removed.
    pub(crate) fn error(&self, e: &redis::RedisError) -> Error {
        Error::from_redis(e, &|s| redact_with(&self.inner.secrets, s))
    }

    pub(crate) fn inner_secrets(&self) -> Vec<String> {
        self.inner.secrets.clone()
    }

    pub(crate) fn redactor(&self) -> impl Fn(String) -> String + Sync + '_ {
        |s| redact_with(&self.inner.secrets, s)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("server", &self.inner.addr).finish_non_exhaustive()
    }
}

/// Why the holds of a closed client are lost, and its later calls refused.
pub(crate) const CLOSED_WHY: &str = "the client was closed";

/// The error of any call on a closed client (or a lock or guard made from it).
pub(crate) fn closed_error() -> Error {
    Error::new(ErrorKind::Closed, CLOSED_WHY)
}

/// What a message about a connection shows, with its secrets taken out.
///
/// First the server's own echo of a command's arguments is dropped whole: Redis answers a
/// command it does not know with "unknown command 'HELLO', with args beginning with: '3' 'AUTH'
/// <user> <password>", the arguments cut to 128 bytes and with CR and LF made spaces, so an
/// exact match would miss a long password or one with a line break (a server without HELLO).
///
/// Then each secret, longest first (one may contain another), is replaced where it stands as a
/// word of its own: not where it is only part of a longer run of letters and digits, since a
/// short password would otherwise blank out, and so give away, letters of ordinary words
/// ("Conn<redacted>ction"). An echo of a secret is quoted or delimited, and is still caught.
fn redact_with(secrets: &[String], s: String) -> String {
    const ECHO: &str = "with args beginning with";
    let mut s = match s.find(ECHO) {
        Some(i) => format!("{} (its arguments withheld)", s[..i].trim_end_matches([',', ' '])),
        None => s,
    };
    let mut secrets: Vec<&str> = secrets.iter().map(String::as_str).filter(|x| !x.is_empty()).collect();
    secrets.sort_by_key(|x| std::cmp::Reverse(x.len()));
    for secret in secrets {
        s = replace_words(&s, secret, "<redacted>");
    }
    s
}

/// `s` with every occurrence of `word` that is not glued to letters or digits on a side where
/// `word` itself begins or ends with one replaced by `with`.
fn replace_words(s: &str, word: &str, with: &str) -> String {
    let alnum = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let (starts, ends) = (alnum(word.chars().next()), alnum(word.chars().next_back()));
    let mut out = String::with_capacity(s.len());
    let mut rest = 0;
    let mut from = 0;
    while let Some(i) = s[from..].find(word).map(|i| from + i) {
        let j = i + word.len();
        let glued = (starts && alnum(s[..i].chars().next_back())) || (ends && alnum(s[j..].chars().next()));
        if glued {
            // Not a word of its own here: look again from the next character.
            from = i + s[i..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        out.push_str(&s[rest..i]);
        out.push_str(with);
        rest = j;
        from = j;
    }
    out.push_str(&s[rest..]);
    out
}

/// The plain-text and the TLS scheme of one kind of URL: what a TLS/plain-text mix-up hint
/// tells the user to write instead of the scheme they gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Schemes {
    pub plain: &'static str,
    pub tls: &'static str,
}

impl Schemes {
    /// `redis://` and `rediss://`: one server (also each master of a Redlock list).
    pub const DIRECT: Schemes = Schemes { plain: "redis://", tls: "rediss://" };
}

/// One server to connect to: the parsed URL, its secrets (for redaction) and a printable address.
pub(crate) struct Target {
    pub client: redis::Client,
    /// `rediss://`.
    pub tls: bool,
    pub secrets: Vec<String>,
    pub addr: String,
    /// The kind of URL the user gave, for hints ([`Schemes::DIRECT`] unless set otherwise).
    pub schemes: Schemes,
}

impl Target {
    pub fn parse(url: &str, tls: &TlsOptions) -> Result<Target> {
        Self::from_info(parse_url(url)?, tls)
    }

    pub fn from_info(info: redis::ConnectionInfo, tls: &TlsOptions) -> Result<Target> {
        let secrets = secrets_of(&info);
        let addr = format!("{}/{}", info.addr(), info.redis_settings().db());
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let redact = |s| redact_with(&secrets, s);
        let tls_url = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
        let client = match info.addr() {
            redis::ConnectionAddr::TcpTls { insecure: true, .. } => {
                return Err(Error::new(
                    ErrorKind::InvalidUrl,
                    "certificate verification cannot be turned off (#insecure): give the server's CA \
                     in the TLS options instead",
                ));
            }
            redis::ConnectionAddr::TcpTls { .. } => {
                install_crypto_provider();
                if tls.is_set() {
                    let certs = redis::TlsCertificates {
                        client_tls: tls.client_cert_pem.clone().zip(tls.client_key_pem.clone()).map(
                            |(client_cert, client_key)| redis::ClientTlsConfig { client_cert, client_key },
                        ),
                        root_cert: tls.root_certs_pem.clone(),
                    };
                    redis::Client::build_with_tls(info, certs).map_err(|e| {
                        Error::new(
                            ErrorKind::Tls,
                            format!("unusable TLS certificates or key: {}", redact(e.to_string())),
                        )
                    })?
                } else {
                    redis::Client::open(info).map_err(|e| Error::from_redis(&e, &redact))?
                }
            }
            _ if tls.is_set() => {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    "TLS options are set but the URL is not rediss://: refusing to connect in clear text",
                ));
            }
            _ => redis::Client::open(info).map_err(|e| Error::from_redis(&e, &redact))?,
        };
        Ok(Target { client, tls: tls_url, secrets, addr, schemes: Schemes::DIRECT })
    }

    /// The same server, reached through a URL of another kind (a master named by the sentinels
    /// of a `redis+sentinel://` URL): hints name that kind's schemes.
    pub fn with_schemes(self, schemes: Schemes) -> Target {
        Target { schemes, ..self }
    }

    /// A reconnecting RESP3 connection whose pushes go to `notifier`.
    pub async fn manager(
        &self,
        opts: &ClientOptions,
        response_timeout: Option<Duration>,
        notifier: &Arc<Notifier>,
    ) -> Result<ConnectionManager> {
        let push = Arc::downgrade(notifier);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(opts.connect_timeout))
            .set_response_timeout(response_timeout)
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500))
            .set_push_sender(move |info| {
                if let Some(n) = push.upgrade() {
                    n.on_push(info);
                }
                Ok::<(), ()>(())
            })
            .set_automatic_resubscription();
        ConnectionManager::new_with_config(self.client.clone(), config)
            .await
            .map_err(|e| self.connect_error(&e))
    }

    /// A failed connection to this server, named by its address (never the credentials: with
    /// several servers, Redlock or a list of seeds, the message is useless otherwise) and with a
    /// hint when it looks like a TLS/plain-text mix-up. The two ways a mix-up shows: a TLS client
    /// hello that a plain-text server reads as an unfinished command (no reply), and a
    /// plain-text command that a TLS server answers by closing the connection. The hint names
    /// the scheme of the kind of URL the user gave (`self.schemes`).
    ///
    /// A server's error reply while connecting refuses what the URL asked for (its database
    /// number; a Sentinel URL's server that is no Sentinel): `InvalidUrl`, not a script failure.
    pub fn connect_error(&self, e: &redis::RedisError) -> Error {
        let err = Error::from_redis(e, &|s| redact_with(&self.secrets, s));
        if err.kind() == ErrorKind::Script
            && err.message().contains("unknown command")
            && err.message().contains("HELLO")
        {
            // Not the URL's fault: the server is too old (or HELLO is renamed).
            return Error::new(
                ErrorKind::Script,
                format!(
                    "{}: {} (ferrolock speaks RESP3: it needs Redis 6 or newer, with HELLO available)",
                    self.addr,
                    err.message()
                ),
            );
        }
        let kind = match err.kind() {
            ErrorKind::Script => ErrorKind::InvalidUrl,
            k => k,
        };
        let hint = self.mixup_hint(e, kind).unwrap_or_default();
        Error::new(kind, format!("{}: {}{hint}", self.addr, err.message()))
    }

    /// The TLS/plain-text mix-up hint for a failed connection (see [`Self::connect_error`]).
    pub fn mixup_hint(&self, e: &redis::RedisError, kind: ErrorKind) -> Option<String> {
        match (self.tls, kind) {
            (true, ErrorKind::Timeout) => Some(format!(
                " (no TLS handshake reply: is this a plain-text port? (use {}))",
                self.schemes.plain
            )),
            // (Not for a refused connection: nothing listens there, TLS or not.)
            (false, ErrorKind::Connection)
                if !e.is_connection_refusal()
                    && (e.is_connection_dropped() || e.is_unrecoverable_error()) =>
            {
                Some(format!(
                    " (the server closed the connection: if it expects TLS, use {})",
                    self.schemes.tls
                ))
            }
            _ => None,
        }
    }
}

/// The length of the scheme `url` starts with (case-insensitive), and whether it is `tls`
/// rather than `plain`.
pub(crate) fn scheme_of(url: &str, plain: &str, tls: &str) -> Option<(usize, bool)> {
    let starts = |scheme: &str| url.get(..scheme.len()).is_some_and(|s| s.eq_ignore_ascii_case(scheme));
    if starts(plain) {
        Some((plain.len(), false))
    } else if starts(tls) {
        Some((tls.len(), true))
    } else {
        None
    }
}

/// The texts to redact from messages about a connection made with `info`: its password.
pub(crate) fn secrets_of(info: &redis::ConnectionInfo) -> Vec<String> {
    info.redis_settings().password().filter(|p| !p.is_empty()).map(str::to_owned).into_iter().collect()
}

/// rustls needs a process-wide crypto provider; redis enables none. Install ring's once, unless
/// the application already chose one.
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

pub(crate) fn redact_secrets(secrets: &[String], s: String) -> String {
    redact_with(secrets, s)
}

pub(crate) fn parse_url(url: &str) -> Result<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo;
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
    if scheme.eq_ignore_ascii_case("redis+cluster") || scheme.eq_ignore_ascii_case("rediss+cluster") {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            "redis+cluster:// and rediss+cluster:// need ferrolock built with the `cluster` feature",
        ));
    }
    // Schemes are case-insensitive (RFC 3986); the driver wants them in lower case.
    let scheme = scheme.to_ascii_lowercase();
    let lowered = format!("{scheme}{}", &url[scheme.len()..]);
    if !matches!(scheme.as_str(), "redis" | "rediss" | "redis+unix" | "unix") {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            "unsupported URL scheme (expected redis://, rediss://, redis+unix://, redis+sentinel://, \
             rediss+sentinel://, redis+cluster:// or rediss+cluster://)",
        ));
    }
    // Never echo the URL: it may carry a password. The reasons given are fixed texts: url's
    // messages for a URL that does not parse, the first part of the driver's otherwise (its
    // detail part may quote the URL).
    let parsed = url::Url::parse(&lowered)
        .map_err(|e| Error::new(ErrorKind::InvalidUrl, format!("cannot parse the server URL: {e}")))?;
    parsed.into_connection_info().map_err(|e| {
        let shown = e.to_string();
        let why = shown.split(" - ").next().unwrap_or("");
        Error::new(ErrorKind::InvalidUrl, format!("cannot use the server URL: {}", why.to_lowercase()))
    })
}

// ---- reply decoding (shared with lock.rs) ----

fn protocol(what: &str) -> Error {
    Error::new(ErrorKind::Protocol, format!("unexpected reply from script: {what}"))
}

pub(crate) fn as_array(v: &Value) -> Result<&[Value]> {
    match v {
        Value::Array(items) => Ok(items),
        _ => Err(protocol("expected an array")),
    }
}

pub(crate) fn int_at(items: &[Value], i: usize) -> Result<i64> {
    match items.get(i) {
        Some(Value::Int(n)) => Ok(*n),
        _ => Err(protocol("expected an integer")),
    }
}

pub(crate) fn bytes_at(items: &[Value], i: usize) -> Result<Vec<u8>> {
    match items.get(i) {
        Some(Value::BulkString(b)) => Ok(b.clone()),
        Some(Value::SimpleString(s)) => Ok(s.as_bytes().to_vec()),
        _ => Err(protocol("expected a string")),
    }
}

/// An integer sent either as an integer reply or as a decimal string (fences are sent as strings
/// so they never pass through a double on the way out).
pub(crate) fn parse_num<T: TryFrom<i64> + std::str::FromStr>(items: &[Value], i: usize) -> Result<T> {
    match items.get(i) {
        Some(Value::Int(n)) => T::try_from(*n).map_err(|_| protocol("integer out of range")),
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol("expected a decimal integer")),
        _ => Err(protocol("expected a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_with;

    fn redact(secrets: &[&str], s: &str) -> String {
        redact_with(&secrets.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>(), s.to_owned())
    }

    #[test]
    fn a_servers_echo_of_arguments_is_withheld() {
        // A server without HELLO quotes its arguments, cut short and with CR/LF made spaces: an
        // exact match missed such a password (a security review's finding).
        let echo =
            "ResponseError: unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'me' 'line1 line2'";
        let out = redact(&["line1\nline2"], echo);
        assert_eq!(out, "ResponseError: unknown command 'HELLO' (its arguments withheld)");
        assert!(!out.contains("line1") && !out.contains("'me'"), "{out}");
    }

    #[test]
    fn secrets_are_replaced_as_words_longest_first() {
        // A quoted or delimited echo is caught.
        assert_eq!(redact(&["hunter2"], "WRONGPASS for 'hunter2'"), "WRONGPASS for '<redacted>'");
        assert_eq!(redact(&["p@ss word"], "auth p@ss word failed"), "auth <redacted> failed");
        // A short password inside ordinary words is left alone: blanking it out garbled the
        // message and gave the password away ("Conn<redacted>ction r<redacted>fus<redacted>d").
        assert_eq!(redact(&["e"], "Connection refused"), "Connection refused");
        assert_eq!(redact(&["111"], "os error 1111"), "os error 1111");
        // One secret inside another: the longer goes first, leaving nothing of it.
        assert_eq!(redact(&["pw", "pw-sentinel"], "bad pw-sentinel"), "bad <redacted>");
        // Non-ASCII around and inside.
        assert_eq!(redact(&["пароль"], "«пароль» x"), "«<redacted>» x");
        assert_eq!(redact(&[""], "empty secrets are ignored"), "empty secrets are ignored");
    }

    /// The URL's password is what a connection's errors are redacted with, end to end from the
    /// URL: a server reply quoting it shows `<redacted>` (the redaction had no secret to look
    /// for when the URL's password was not collected, and every other test passed: the servers
    /// used there never quote it).
    #[test]
    fn a_connect_error_quoting_the_urls_password_redacts_it() {
        let target =
            super::Target::parse("redis://me:Hunter2-pw%21@127.0.0.1:1/4", &Default::default()).unwrap();
        let reply = redis::parse_redis_value(b"-ERR invalid password 'Hunter2-pw!' for me\r\n").unwrap();
        let e = target.connect_error(&reply.extract_error().unwrap_err());
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("Hunter2-pw"), "{shown}");
        assert!(shown.contains("'<redacted>'") && shown.contains("127.0.0.1:1/4"), "{shown}");
    }
}
