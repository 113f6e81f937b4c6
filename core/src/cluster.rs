//! Redis Cluster (cargo feature `cluster`): `redis+cluster://[user:password@]host:port[,host:port…]`
//! names seed nodes; redis's cluster-async connection finds the rest, follows MOVED/ASK and
//! failovers, and routes every script by its first key. All keys of one lock share the hash tag
//! `{name}` (docs/PROTOCOL.md), so each script touches one slot.
//!
//! Release notifications use sharded pub/sub (docs/GUARANTEES.md, Redis Cluster): the scripts
//! `SPUBLISH` and waiters `SSUBSCRIBE` on the master of the lock's slot, over dedicated per-node
//! connections that carry no lock command (cluster_sub.rs), resubscribed after a slot move or a
//! failover.
//!
//! TLS: `rediss+cluster://…` (same syntax) speaks TLS to every node, the seeds and those the
//! cluster names, with the CA and client certificate of `ClientOptions::tls`, verified like
//! `rediss://`: the chain against the given CA (or the system store) and the name against the
//! host, i.e. the seed's host as written in the URL and each node's endpoint as `CLUSTER SLOTS`
//! reports it (an IP unless the nodes run with `cluster-announce-hostname` and
//! `cluster-preferred-endpoint-type hostname`, so the certificates must name those IPs, or the
//! nodes must announce host names). There is no mixed mode and no way to turn verification off;
//! TLS options with a plain `redis+cluster://` URL are refused (`InvalidConfig`) rather than
//! ignored.

use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisResult, Value};

use crate::client::{Schemes, Target};
use crate::error::{Error, ErrorKind, Result};
use crate::notify::Notifier;
use crate::options::ClientOptions;

const SCHEME: &str = "redis+cluster://";
/// TLS to every node.
const TLS_SCHEME: &str = "rediss+cluster://";

pub(crate) fn is_cluster_url(url: &str) -> bool {
    scheme_of(url).is_some()
}

/// The length of the cluster scheme `url` starts with, and whether it is the TLS one.
fn scheme_of(url: &str) -> Option<(usize, bool)> {
    crate::client::scheme_of(url, SCHEME, TLS_SCHEME)
}

fn bad_url(why: &str) -> Error {
    // Never echo the URL: it may carry a password.
    Error::new(
        ErrorKind::InvalidUrl,
        format!("cluster URL: {why} (expected {SCHEME} or {TLS_SCHEME}, then host:port[,host:port])"),
    )
}

/// A parsed cluster URL: the seed nodes, with the credentials each connection uses.
pub(crate) struct ClusterConfig {
    seeds: Vec<redis::ConnectionInfo>,
    /// `rediss+cluster://`: TLS to every node.
    tls: bool,
    pub secrets: Vec<String>,
    pub description: String,
}

impl ClusterConfig {
    pub fn parse(url: &str, opts: &ClientOptions) -> Result<ClusterConfig> {
        let (scheme_len, tls) = scheme_of(url).ok_or_else(|| bad_url("not a cluster URL"))?;
        if opts.tls.is_set() && !tls {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                "TLS options are set but the URL is redis+cluster://: refusing to connect in clear text \
                 (use rediss+cluster:// for TLS to every node)",
            ));
        }
        let rest = &url[scheme_len..];
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(bad_url("a cluster has no db or path"));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let mut seeds = Vec::new();
        let mut shown = Vec::new();
        for h in hosts.split(',') {
            let (host, port) = h.rsplit_once(':').ok_or_else(|| bad_url("a seed without a port"))?;
            let port: u16 = port.parse().map_err(|_| bad_url("a seed port is not a number"))?;
            if host.is_empty() || port == 0 {
                return Err(bad_url("an empty seed address"));
            }
            let scheme = if tls { "rediss" } else { "redis" };
            let info = crate::client::parse_url(&format!("{scheme}://{auth}{host}:{port}"))
                .map_err(|_| bad_url("cannot parse a seed or the credentials"))?;
            seeds.push(info);
            shown.push(format!("{host}:{port}"));
        }
        let secrets = seeds.first().map(crate::client::secrets_of).unwrap_or_default();
        let shown_tls = if tls { ", tls" } else { "" };
        let description = format!("cluster(seeds {}{shown_tls})", shown.join(", "));
        Ok(ClusterConfig { seeds, tls, secrets, description })
    }

    /// A RESP3 cluster connection `cmd` for the scripts, without a push sender, and `sub`, the
    /// sharded release-channel subscriptions on dedicated per-node connections
    /// (cluster_sub.rs), whose messages go to `notifier`.
    ///
    /// Why apart: redis 1.8.1 takes a subscription confirmation or an unsolicited `sunsubscribe`
    /// push as the reply to the oldest command pending on that connection (after a failover or a
    /// slot move: its cluster resubscription sends one `SUBSCRIBE c1 … cN` expecting one reply,
    /// and Redis sends every sharded subscriber of a moved slot a `sunsubscribe`), which shifted
    /// script replies (an acquire read a release's `-1`). The script connection therefore has no
    /// push sender, hence no subscriptions and no resubscription traffic; on `sub`, a stray push
    /// can only complete a SSUBSCRIBE/SUNSUBSCRIBE early, and each of those checks its reply.
    pub async fn connect(&self, opts: &ClientOptions, notifier: &Arc<Notifier>) -> Result<ClusterConns> {
        let redact = |s| crate::client::redact_secrets(&self.secrets, s);
        let built = |b: redis::cluster::ClusterClientBuilder| {
            b.build().map_err(|e| {
                let err = Error::from_redis(&e, &redact);
                if self.tls && err.kind() != ErrorKind::Tls {
                    // The certificates or key are checked here (`retrieve_tls_certificates`).
                    Error::new(ErrorKind::Tls, format!("unusable TLS certificates or key: {}", err.message()))
                } else {
                    err
                }
            })
        };
        let cmd = built(self.builder(opts))?;
        let cmd = match cmd.get_async_connection().await {
            Ok(c) => c,
            Err(e) => return Err(self.connect_error(&e, opts).await),
        };
        let template = self.seeds.first().cloned().ok_or_else(|| bad_url("no seed"))?;
        let opts = Arc::new(opts.clone());
        let sub = crate::cluster_sub::ShardedSubs::new(cmd.clone(), template, opts, notifier);
        Ok(ClusterConns { cmd, sub })
    }

    /// The error for a failed first connection. redis reports a failure to reach every seed as
    /// an I/O error carrying only the text of the last cause, which hides both a refused TLS
    /// handshake (wrong CA, wrong host name) and a TLS/plain-text mix-up (`rediss+cluster://` to
    /// plain-text ports, or the reverse). Ask each seed once more on its own connection, whose
    /// error keeps its cause: a TLS refusal is reported as such, a mix-up with the hint a
    /// `rediss://` URL gets, naming the cluster schemes.
    async fn connect_error(&self, e: &redis::RedisError, opts: &ClientOptions) -> Error {
        let redact = |s| crate::client::redact_secrets(&self.secrets, s);
        let err = Error::from_redis(e, &redact);
        if err.kind() == ErrorKind::Tls {
            return err;
        }
        if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
            && err.message().contains("cluster support disabled")
        {
            // A single server given a cluster URL: a configuration error, not a script's.
            return Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "{}: the server is not part of a Redis Cluster; use a redis:// (or rediss://) URL for one server",
                    err.message()
                ),
            );
        }
        let schemes = Schemes { plain: SCHEME, tls: TLS_SCHEME };
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(opts.connect_timeout))
            .set_response_timeout(Some(opts.connect_timeout));
        // All seeds at once: the whole probe takes at most one connect timeout.
        let mut probes = tokio::task::JoinSet::new();
        for seed in &self.seeds {
            let Ok(target) = Target::from_info(seed.clone(), &opts.tls) else { continue };
            let (target, config, addr) =
                (target.with_schemes(schemes), config.clone(), seed.addr().to_string());
            probes.spawn(async move {
                let e = target.client.get_multiplexed_async_connection_with_config(&config).await.err()?;
                let probed = Error::from_redis(&e, &|s| crate::client::redact_secrets(&target.secrets, s));
                let hint = target.mixup_hint(&e, probed.kind());
                (probed.kind() == ErrorKind::Tls || hint.is_some()).then(|| {
                    let hint = hint.unwrap_or_default();
                    Error::new(probed.kind(), format!("cluster seed {addr}: {}{hint}", probed.message()))
                })
            });
        }
        while let Some(probed) = probes.join_next().await {
            if let Ok(Some(e)) = probed {
                return e;
            }
        }
        err
    }

    fn builder(&self, opts: &ClientOptions) -> redis::cluster::ClusterClientBuilder {
        let mut b = redis::cluster::ClusterClientBuilder::new(self.seeds.clone())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(opts.connect_timeout)
            .response_timeout(opts.response_timeout)
            .retries(3);
        if self.tls {
            // Verified: `TlsMode::Secure`, never `Insecure`; the CA and client certificate of
            // `opts.tls` (the system store when no CA is given), as for `rediss://`.
            crate::client::install_crypto_provider();
            b = b.tls(redis::TlsMode::Secure);
            if opts.tls.is_set() {
                let tls = &opts.tls;
                b =
                    b.certs(redis::TlsCertificates {
                        client_tls: tls.client_cert_pem.clone().zip(tls.client_key_pem.clone()).map(
                            |(client_cert, client_key)| redis::ClientTlsConfig { client_cert, client_key },
                        ),
                        root_cert: tls.root_certs_pem.clone(),
                    });
            }
        }
        if let Some(first) = self.seeds.first() {
            if let Some(user) = first.redis_settings().username() {
                b = b.username(user);
            }
            if let Some(pass) = first.redis_settings().password() {
                b = b.password(pass);
            }
        }
        b
    }
}

/// A client's cluster connections: scripts on `cmd`, sharded release-channel subscriptions on
/// `sub` (see [`ClusterConfig::connect`] for why they are apart).
#[derive(Clone)]
pub(crate) struct ClusterConns {
    pub cmd: ClusterConnection,
    pub sub: Arc<crate::cluster_sub::ShardedSubs>,
}

/// One command on the cluster; a timeout starts a check of the slot's master
/// ([`crate::cluster_sub::ShardedSubs::after_timeout`]).
pub(crate) fn req_command<'a>(conns: &'a mut ClusterConns, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
    Box::pin(async move {
        let r = conns.cmd.req_packed_command(cmd).await;
        if let Err(e) = &r
            && e.is_timeout()
            && let Some(key) = first_key(cmd)
        {
            conns.sub.after_timeout(key);
        }
        r
    })
}

/// The first key of a lock command: a script's `KEYS[1]`, else the first argument.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|a| match a {
        redis::Arg::Simple(b) => b,
        _ => &[][..],
    });
    let name = args.next()?;
    if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") {
        let numkeys = args.nth(1)?;
        return (numkeys != b"0").then(|| args.next()).flatten();
    }
    args.next()
}

/// A pipeline on a cluster: redis refuses one whose keys span slots, and the watchdog's renewal
/// pipeline holds many locks. Send its commands concurrently, each to its own slot's node, and
/// return the replies in order (server errors as error values, like a pipeline's).
pub(crate) fn req_commands<'a>(
    conns: &'a mut ClusterConns,
    pipeline: &'a Pipeline,
    offset: usize,
    count: usize,
) -> redis::RedisFuture<'a, Vec<Value>> {
    if pipeline.is_transaction() || offset != 0 || count != pipeline.len() {
        return conns.cmd.req_packed_commands(pipeline, offset, count);
    }
    Box::pin(async move {
        let mut set = tokio::task::JoinSet::new();
        for (i, cmd) in pipeline.cmd_iter().enumerate() {
            let (mut c, cmd): (ClusterConns, Cmd) = (conns.clone(), cmd.clone());
            set.spawn(async move { (i, req_command(&mut c, &cmd).await) });
        }
        let mut out: Vec<Option<Value>> = vec![None; pipeline.len()];
        while let Some(joined) = set.join_next().await {
            let (i, r): (usize, RedisResult<Value>) = joined.map_err(|_| {
                redis::RedisError::from((redis::ErrorKind::Client, "cluster pipeline task failed"))
            })?;
            out[i] = Some(match r {
                Ok(v) => v,
                Err(e) => match redis::ServerError::try_from(e) {
                    Ok(server) => Value::ServerError(server),
                    Err(e) => return Err(e),
                },
            });
        }
        Ok(out.into_iter().map(|v| v.unwrap_or(Value::Nil)).collect())
    })
}

/// `pipeline` as one unit (one write, its replies read together) on the connection to the
/// master of `key`'s slot. Unlike [`req_commands`], nothing is split: replica acknowledgement
/// (replicas.rs) needs its `WAIT` on the connection that carried the grant. A `MOVED`/`ASK`
/// reply to any command makes the driver resend the whole pipeline to the node named, as one
/// unit again; when that node's connection is down, the driver may send it to another node, where
/// the script is answered with `MOVED` (so nothing is granted there and its `WAIT` counts nothing).
pub(crate) async fn req_pipeline_on_slot_master(
    conn: &mut ClusterConnection,
    pipeline: &Pipeline,
    key: &[u8],
) -> RedisResult<Vec<Value>> {
    use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
    let route = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
    conn.route_pipeline(pipeline.clone(), 0, pipeline.len(), route).await
}
