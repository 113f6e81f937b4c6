//! Redis Sentinel: find the master through the sentinels, and follow a failover by rebuilding the
//! connection when the master changes.
//!
//! URL: `redis+sentinel://[user:password@]host:port[,host:port…]/master-name[/db]
//! [?sentinel_username=…&sentinel_password=…]` (sentinel port 26379 when omitted). The userinfo
//! credentials and db are the master's; the sentinels are asked with the `sentinel_*` query
//! parameters (percent-encoded) if given, and without credentials otherwise.
//!
//! TLS: `rediss+sentinel://…` (same syntax) speaks TLS to the sentinels *and* to every master
//! they name, with the CA and client certificate of `ClientOptions::tls`, verified like
//! `rediss://`: the chain against the given CA (or the system store) and the name against the
//! host, i.e. the sentinel's host as written in the URL and the master's host as the sentinels
//! report it (an IP unless they run with `announce-hostnames yes`, so the master's certificate
//! must name that IP, or the sentinels must announce host names). There is no mixed mode and no
//! way to turn verification off; TLS options with a plain `redis+sentinel://` URL are refused
//! (`InvalidConfig`) rather than ignored.
//!
//! A `ConnectionManager` reconnects to the address it was built with, so it does not follow a
//! failover by itself (docs/TOOLCHAIN). [`SentinelConn`] keeps the current master's manager and
//! replaces it when the sentinels name another master. It asks them again when a command fails
//! in a way a failover explains (a `READONLY` reply from a demoted master, a dropped or refused
//! connection, a timeout), and at once when a sentinel announces `+switch-master` (one RESP3
//! subscription on one sentinel, moved to the next sentinel if it fails). A new manager is only
//! used after `ROLE` on it says `master`; it is subscribed to the release channels the old one
//! had, and every waiter is woken to try again there.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{ConnectionAddr, PushInfo, PushKind, RedisResult, Value};

use crate::client::{Schemes, Target};
use crate::error::{Error, ErrorKind, Result};
use crate::notify::Notifier;
use crate::options::{ClientOptions, TlsOptions};

const SCHEME: &str = "redis+sentinel://";
/// TLS to the sentinels and to the masters they name.
const TLS_SCHEME: &str = "rediss+sentinel://";
/// What a TLS/plain-text mix-up hint (with a sentinel or a master) tells the user to write.
const SCHEMES: Schemes = Schemes { plain: SCHEME, tls: TLS_SCHEME };
const DEFAULT_PORT: u16 = 26379;
/// Least time between two lookups triggered by command errors (each opens a connection to a
/// sentinel; `+switch-master` bypasses it).
const REFRESH_GAP: Duration = Duration::from_millis(250);

pub(crate) fn is_sentinel_url(url: &str) -> bool {
    scheme_of(url).is_some()
}

/// The length of the sentinel scheme `url` starts with, and whether it is the TLS one.
fn scheme_of(url: &str) -> Option<(usize, bool)> {
    crate::client::scheme_of(url, SCHEME, TLS_SCHEME)
}

/// A parsed sentinel URL.
pub(crate) struct SentinelConfig {
    pub sentinels: Vec<(String, u16)>,
    pub master: String,
    /// The master's connection settings (credentials, db); the address is filled in per master.
    template: redis::ConnectionInfo,
    /// `rediss+sentinel://`: TLS to the sentinels and the masters.
    tls: bool,
    /// One target per entry of `sentinels`, with the sentinels' own credentials
    /// (`sentinel_username`, `sentinel_password`) and, with `tls`, the TLS options.
    sentinel_clients: Vec<Target>,
    pub secrets: Vec<String>,
}

fn bad_url(why: &str) -> Error {
    // Never echo the URL: it may carry a password.
    Error::new(
        ErrorKind::InvalidUrl,
        format!(
            "sentinel URL: {why} (expected {SCHEME} or {TLS_SCHEME}, then host:port[,host:port]/\
             master-name[/db][?sentinel_username=…&sentinel_password=…])"
        ),
    )
}

impl SentinelConfig {
    pub fn parse(url: &str, opts: &ClientOptions) -> Result<SentinelConfig> {
        let (scheme_len, tls) = scheme_of(url).ok_or_else(|| bad_url("not a sentinel URL"))?;
        if opts.tls.is_set() && !tls {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "TLS options are set but the URL is redis+sentinel://: refusing to connect in clear text \
                 (use rediss+sentinel:// for TLS to the sentinels and the masters)",
            ));
        }
        let rest = &url[scheme_len..];
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').ok_or_else(|| bad_url("no master name"))?;
        let mut sentinel_auth: (Option<String>, Option<String>) = (None, None);
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let slot = match &*key {
                "sentinel_username" => &mut sentinel_auth.0,
                "sentinel_password" => &mut sentinel_auth.1,
                // Echo neither key nor value: a mistyped URL may carry a password in either.
                _ => return Err(bad_url("an unknown query parameter")),
            };
            if slot.replace(value.into_owned()).is_some() {
                return Err(bad_url("a query parameter given twice"));
            }
        }
        if sentinel_auth.0.is_some() && sentinel_auth.1.is_none() {
            return Err(bad_url("sentinel_username without sentinel_password"));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let mut sentinels = Vec::new();
        for h in hosts.split(',') {
            let (host, port) = match h.rsplit_once(':') {
                Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
                    (host, port.parse::<u16>().map_err(|_| bad_url("a sentinel port is not a number"))?)
                }
                _ => (h, DEFAULT_PORT),
            };
            // A ':' left in the host belongs to an IPv6 literal in brackets, or to a mistyped
            // `user:password` that lost its '@': refused without echoing it.
            if host.contains(':') && !host.starts_with('[') {
                return Err(bad_url("a sentinel address is not host:port"));
            }
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() || port == 0 {
                return Err(bad_url("an empty sentinel address"));
            }
            if !sentinels.iter().any(|(h, p)| h == host && *p == port) {
                sentinels.push((host.to_owned(), port));
            }
        }
        let mut parts = path.trim_end_matches('/').splitn(2, '/');
        let master = parts.next().unwrap_or("");
        if master.is_empty() || master.contains(['?', '#']) {
            return Err(bad_url("no master name"));
        }
        let db = match parts.next() {
            Some(db) => db.parse::<u32>().map_err(|_| bad_url("the db is not a number"))?,
            None => 0,
        };
        let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let template = crate::client::parse_url(&format!("redis://{auth}127.0.0.1:6379/{db}"))
            .map_err(|_| bad_url("cannot parse the credentials"))?;
        let mut secrets = crate::client::secrets_of(&template);
        secrets.extend(sentinel_auth.1.iter().filter(|p| !p.is_empty()).cloned());
        let mut cfg = SentinelConfig {
            sentinels,
            master: master.to_owned(),
            template,
            tls,
            sentinel_clients: Vec::new(),
            secrets,
        };
        // Built before any I/O: unusable certificates fail here, once.
        cfg.sentinel_clients = cfg
            .sentinels
            .iter()
            .map(|(host, port)| cfg.sentinel_client(host, *port, &sentinel_auth, &opts.tls))
            .collect::<Result<_>>()?;
        Ok(cfg)
    }

    /// `sentinel(name via host:port, …[, tls])` for Debug output.
    pub fn describe(&self) -> String {
        let list: Vec<String> = self.sentinels.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        let tls = if self.tls { ", tls" } else { "" };
        format!("sentinel({} via {}{tls})", self.master, list.join(", "))
    }

    /// `host:port`, over TLS with `rediss+sentinel://` (host name verified: never `insecure`).
    fn addr(&self, host: &str, port: u16) -> ConnectionAddr {
        if self.tls {
            ConnectionAddr::TcpTls { host: host.to_owned(), port, insecure: false, tls_params: None }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), port)
        }
    }

    /// One sentinel, made like the masters (`Target`: same TLS handling, same mix-up hints
    /// naming the Sentinel schemes).
    fn sentinel_client(
        &self,
        host: &str,
        port: u16,
        auth: &(Option<String>, Option<String>),
        tls: &TlsOptions,
    ) -> Result<Target> {
        let info = self.template.clone().set_addr(self.addr(host, port));
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some(user) = &auth.0 {
            settings = settings.set_username(user);
        }
        if let Some(password) = &auth.1 {
            settings = settings.set_password(password);
        }
        Ok(Target::from_info(info.set_redis_settings(settings), tls)?.with_schemes(SCHEMES))
    }
}

struct Current {
    manager: ConnectionManager,
    addr: (String, u16),
}

/// The connection to whichever server the sentinels name as master.
pub(crate) struct SentinelConn {
    cfg: SentinelConfig,
    opts: Arc<ClientOptions>,
    notifier: Weak<Notifier>,
    current: RwLock<Current>,
    /// Release channels subscribed through this connection (resubscribed on a new master).
    channels: Mutex<BTreeSet<Vec<u8>>>,
    /// Serialises lookups; the time of the last one.
    refresh: tokio::sync::Mutex<Option<Instant>>,
    refresh_queued: AtomicBool,
    /// Test knob: while on, a master switch waits after listing the channels to resubscribe.
    pause: AtomicBool,
    /// A master switch waits at that pause now.
    paused: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SentinelConn {
    pub async fn connect(
        cfg: SentinelConfig,
        opts: Arc<ClientOptions>,
        notifier: &Arc<Notifier>,
    ) -> Result<Arc<SentinelConn>> {
        let mut last_failed: Option<Error> = None;
        // A sentinel with a stale view (the master it names is down, or a replica now) is passed
        // over for the next one that names another address.
        let mut tried = Vec::new();
        let (addr, manager) = loop {
            let addr = match discover(&cfg, &opts, &tried).await {
                Ok(a) => a,
                Err(e) => return Err(last_failed.take().unwrap_or(e)),
            };
            match open_master(&cfg, &opts, notifier, &addr).await {
                Ok(m) => break (addr, m),
                Err(e) => {
                    tried.push(addr);
                    last_failed = Some(e);
                }
            }
        };
        let me = Arc::new(SentinelConn {
            cfg,
            opts,
            notifier: Arc::downgrade(notifier),
            current: RwLock::new(Current { manager, addr }),
            channels: Mutex::new(BTreeSet::new()),
            refresh: tokio::sync::Mutex::new(None),
            refresh_queued: AtomicBool::new(false),
            pause: AtomicBool::new(false),
            paused: AtomicBool::new(false),
        });
        tokio::spawn(watch_switch(Arc::downgrade(&me)));
        Ok(me)
    }

    pub fn manager(&self) -> ConnectionManager {
        self.current.read().unwrap_or_else(|p| p.into_inner()).manager.clone()
    }

    /// The master in use now, `host:port`.
    pub fn master_addr(&self) -> String {
        let c = self.current.read().unwrap_or_else(|p| p.into_inner());
        format!("{}:{}", c.addr.0, c.addr.1)
    }

    /// Test knob (see [`crate::Client::set_sentinel_switch_pause_for_tests`]).
    pub fn set_pause(&self, on: bool) {
        self.pause.store(on, Ordering::Relaxed);
    }

    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    pub fn db(&self) -> i64 {
        self.cfg.template.redis_settings().db()
    }

    pub async fn subscribe(self: &Arc<Self>, channel: &[u8]) -> RedisResult<()> {
        lock(&self.channels).insert(channel.to_vec());
        let r = self.manager().subscribe(channel).await;
        if let Err(e) = &r {
            self.after_error(e);
        }
        r
    }

    pub async fn unsubscribe(&self, channel: &[u8]) -> RedisResult<()> {
        lock(&self.channels).remove(channel);
        self.manager().unsubscribe(channel).await
    }

    /// A command failed: if a failover can explain it, look the master up again (in the
    /// background, at most one lookup queued).
    pub fn after_error(self: &Arc<Self>, e: &redis::RedisError) {
        let failover_like = e.code() == Some("READONLY")
            || e.code() == Some("MASTERDOWN")
            || e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout();
        if failover_like {
            self.queue_refresh();
        }
    }

    /// Replies that are server errors (redis returns them as values) and say the server is no
    /// longer a master.
    pub fn after_values(self: &Arc<Self>, values: &[Value]) {
        let demoted =
            |v: &Value| matches!(v, Value::ServerError(e) if matches!(e.code(), "READONLY" | "MASTERDOWN"));
        if values.iter().any(demoted) {
            self.queue_refresh();
        }
    }

    fn queue_refresh(self: &Arc<Self>) {
        if self.refresh_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            me.refresh(false, None).await;
        });
    }

    /// Ask the sentinels who the master is; switch to it if it changed. `named`: the address a
    /// `+switch-master` announced, tried first (the sentinels asked in turn may not all know of
    /// the switch yet, and the first one's stale answer would end the lookup).
    async fn refresh(self: &Arc<Self>, forced: bool, named: Option<(String, u16)>) {
        let mut last = self.refresh.lock().await;
        self.refresh_queued.store(false, Ordering::Release);
        if !forced && last.is_some_and(|t| t.elapsed() < REFRESH_GAP) {
            // Too soon after the last lookup: look again once the gap has passed.
            let wait = REFRESH_GAP.saturating_sub(last.map_or(Duration::ZERO, |t| t.elapsed()));
            drop(last);
            tokio::time::sleep(wait).await;
            last = self.refresh.lock().await;
        }
        *last = Some(Instant::now());
        let Some(notifier) = self.notifier.upgrade() else { return };
        let current = self.current.read().unwrap_or_else(|p| p.into_inner()).addr.clone();
        let mut tried = Vec::new();
        let mut named = named.filter(|a| *a != current);
        let (addr, manager) = loop {
            let found = match named.take() {
                Some(a) => Ok(a),
                None => discover(&self.cfg, &self.opts, &tried).await,
            };
            let addr = match found {
                Ok(a) => a,
                Err(e) => {
                    if tried.is_empty() {
                        tracing::warn!("ferrolock: sentinel lookup failed: {e}");
                    }
                    return;
                }
            };
            if addr == current {
                return;
            }
            match open_master(&self.cfg, &self.opts, &notifier, &addr).await {
                Ok(m) => break (addr, m),
                Err(e) => {
                    tracing::warn!("ferrolock: sentinel: master {}:{} not usable: {e}", addr.0, addr.1);
                    tried.push(addr); // a stale sentinel's answer: ask the next one
                }
            }
        };
        // Every channel subscribed through this connection is subscribed on the new master before
        // it is put in use, with the notifier's subscription decisions held off until then: a
        // channel the sweep took back meanwhile would get its UNSUBSCRIBE on the old master and
        // stay subscribed here with nobody wanting it, and one subscribed meanwhile would go to
        // the old master only. (`channels` changes only under that hold: notify.rs.)
        let ops = notifier.hold_ops().await;
        let channels: Vec<Vec<u8>> = lock(&self.channels).iter().cloned().collect();
        if self.pause.load(Ordering::Relaxed) {
            self.paused.store(true, Ordering::Relaxed);
            while self.pause.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.paused.store(false, Ordering::Relaxed);
        }
        for ch in &channels {
            let _ = manager.clone().subscribe(ch).await;
        }
        tracing::info!("ferrolock: sentinel: master {} is now {}:{}", self.cfg.master, addr.0, addr.1);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Current { manager: manager.clone(), addr };
        drop(ops);
        // Waiters try again on the new master (and re-read the holder's lease there).
        notifier.on_push(PushInfo { kind: PushKind::Disconnection, data: Vec::new() });
    }
}

/// The master's address, from the first sentinel that knows it and names an address not in
/// `skip` (addresses found unusable: a sentinel may name a master that is gone).
async fn discover(
    cfg: &SentinelConfig,
    opts: &ClientOptions,
    skip: &[(String, u16)],
) -> Result<(String, u16)> {
    let mut unknown = 0;
    let mut skipped = 0;
    let mut last_err = None;
    for sentinel in &cfg.sentinel_clients {
        let client = &sentinel.client;
        let ask = async {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(opts.connect_timeout))
                .set_response_timeout(Some(opts.response_timeout));
            let mut c = client.get_multiplexed_async_connection_with_config(&config).await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&cfg.master)
                .query_async::<Option<(String, u16)>>(&mut c)
                .await
        };
        match tokio::time::timeout(opts.connect_timeout + opts.response_timeout, ask).await {
            Ok(Ok(Some(addr))) if !skip.contains(&addr) => return Ok(addr),
            Ok(Ok(Some(_))) => skipped += 1,
            Ok(Ok(None)) => unknown += 1,
            Ok(Err(e)) => {
                // Named, with a hint when TLS meets a plain-text port or the reverse.
                let e = sentinel.connect_error(&e);
                // A refusal retrying cannot fix (a wrong sentinel password, an ACL) wins.
                if last_err.as_ref().is_none_or(|l: &Error| l.kind().is_transient()) {
                    last_err = Some(e);
                }
            }
            Err(_) if last_err.as_ref().is_none_or(|l| l.kind().is_transient()) => {
                last_err = Some(Error::new(ErrorKind::Timeout, "a sentinel did not answer in time"));
            }
            Err(_) => {}
        }
    }
    if unknown > 0 && skipped == 0 && last_err.is_none() {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!("no sentinel knows a master named {:?}", cfg.master),
        ));
    }
    let kind = match &last_err {
        Some(e) if unknown == 0 && !e.kind().is_transient() => e.kind(),
        _ => ErrorKind::Connection,
    };
    let why = last_err.map(|e| e.to_string()).unwrap_or_default();
    Err(Error::new(kind, format!("no sentinel named the master: {why}")))
}

/// A manager for `addr`, used only if that server says it is a master.
async fn open_master(
    cfg: &SentinelConfig,
    opts: &ClientOptions,
    notifier: &Arc<Notifier>,
    addr: &(String, u16),
) -> Result<ConnectionManager> {
    let info = cfg.template.clone().set_addr(cfg.addr(&addr.0, addr.1));
    let target = Target::from_info(info, &opts.tls)?.with_schemes(SCHEMES);
    let mut m = target.manager(opts, Some(opts.response_timeout), notifier).await?;
    let role: Value = redis::cmd("ROLE")
        .query_async(&mut m)
        .await
        .map_err(|e| Error::from_redis(&e, &|s| crate::client::redact_secrets(&cfg.secrets, s)))?;
    let is_master = matches!(&role, Value::Array(items)
        if matches!(items.first(), Some(Value::BulkString(b)) if b == b"master"));
    if !is_master {
        return Err(Error::new(
            ErrorKind::Connection,
            format!("{}:{} is not a master (a failover is in progress?)", addr.0, addr.1),
        ));
    }
    Ok(m)
}

/// Listen for `+switch-master` on one sentinel at a time; look the master up at once when it
/// names ours. Ends when the client is dropped.
async fn watch_switch(this: Weak<SentinelConn>) {
    let mut next = 0usize;
    loop {
        let first = next == 0;
        let (client, timeout) = {
            let Some(me) = this.upgrade() else { return };
            let client = me.cfg.sentinel_clients[next % me.cfg.sentinel_clients.len()].client.clone();
            next += 1;
            (client, me.opts.connect_timeout)
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PushInfo>();
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_push_sender(tx);
        let conn = client.get_multiplexed_async_connection_with_config(&config).await;
        if let Ok(mut conn) = conn
            && conn.subscribe("+switch-master").await.is_ok()
        {
            if !first && let Some(me) = this.upgrade() {
                // Not listening since the last sentinel stopped answering: an announcement may
                // have gone unheard meanwhile.
                me.refresh(false, None).await;
            }
            loop {
                tokio::select! {
                    push = rx.recv() => match push {
                        Some(p) if p.kind == PushKind::Disconnection => break,
                        None => break,
                        Some(p) if p.kind == PushKind::Message => {
                            // payload: "<name> <old-ip> <old-port> <new-ip> <new-port>"
                            let words: Vec<&[u8]> = match p.data.get(1) {
                                Some(Value::BulkString(b)) => b.split(|c| *c == b' ').collect(),
                                _ => Vec::new(),
                            };
                            let ours = words.first() == Some(&this_master(&this).as_bytes());
                            let named = match words.as_slice() {
                                [_, _, _, ip, port] => std::str::from_utf8(ip)
                                    .ok()
                                    .zip(std::str::from_utf8(port).ok().and_then(|p| p.parse().ok()))
                                    .map(|(ip, port)| (ip.to_owned(), port)),
                                _ => None,
                            };
                            if ours && let Some(me) = this.upgrade() {
                                me.refresh(true, named).await;
                            }
                        }
                        Some(_) => {}
                    },
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        if this.strong_count() == 0 {
                            return;
                        }
                        // A sentinel that hangs with the connection open (SIGSTOP, a partition
                        // dropping packets) announces nothing and never disconnects: move on to
                        // the next one when it stops answering.
                        let ping = redis::cmd("PING");
                        let answer = tokio::time::timeout(timeout, ping.query_async::<Value>(&mut conn)).await;
                        if !matches!(answer, Ok(Ok(_))) {
                            break;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn this_master(this: &Weak<SentinelConn>) -> String {
    this.upgrade().map(|me| me.cfg.master.clone()).unwrap_or_default()
}

/// [`ConnectionLike`] over the current master, noting errors a failover explains.
pub(crate) fn req_command<'a>(
    s: &'a Arc<SentinelConn>,
    cmd: &'a redis::Cmd,
) -> redis::RedisFuture<'a, Value> {
    Box::pin(async move {
        let mut m = s.manager();
        let r = crate::client::bounded(Some(s.opts.response_timeout), m.req_packed_command(cmd)).await;
        match &r {
            Err(e) => s.after_error(e),
            // Server errors come back as values; the caller turns them into errors.
            Ok(v) => s.after_values(std::slice::from_ref(v)),
        }
        r
    })
}

pub(crate) fn req_commands<'a>(
    s: &'a Arc<SentinelConn>,
    pipeline: &'a redis::Pipeline,
    offset: usize,
    count: usize,
) -> redis::RedisFuture<'a, Vec<Value>> {
    Box::pin(async move {
        let mut m = s.manager();
        let bound = Some(s.opts.response_timeout);
        let r = crate::client::bounded(bound, m.req_packed_commands(pipeline, offset, count)).await;
        match &r {
            Err(e) => s.after_error(e),
            Ok(values) => s.after_values(values),
        }
        r
    })
}
