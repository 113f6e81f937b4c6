//! Replica acknowledgement of grants ([`crate::ClientOptions::replica_acks`]).
//!
//! `WAIT replicas timeout` counts the replicas that acknowledged *its own connection's* write
//! offset, so it must run on the connection that carried the grant. Sending it as a separate
//! command afterwards cannot promise that: after a reconnection between the script and the `WAIT`
//! (the connection manager's, a Sentinel switch to a new master, a cluster node's connection
//! rebuilt) the `WAIT` runs on another connection, or another server, whose count says nothing
//! about the grant. Servers that move a connection's offset only on its own writes answer such a
//! `WAIT` at once with every replica: a false success. (Redis 7.0 moves it after every command,
//! which happens to be conservative; on a cluster, a `WAIT` sent alone to a slot's master after
//! its connection was killed was observed to reach the slot's replica instead.) So with
//! `replica_acks` the acquire script and its `WAIT` go out as one pipeline: one write on one
//! connection, whose two replies come back together or not at all.
//! On a cluster the pipeline is routed to the master of the lock's slot; a `MOVED`/`ASK` reply to
//! the script makes the driver resend the whole pipeline, again as one unit, to the node named.
//!
//! The caller undoes a grant this refuses (the same compare-and-delete as for an acquire of
//! unknown outcome). Renewals and releases are not acknowledged (docs/GUARANTEES.md).

use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};

use crate::client::{Client, Conn};
use crate::error::{Error, ErrorKind, Result};
use crate::hot::{HotConn, Request};
use crate::lock::LockInner;
use crate::{scripts, timing};

const ACQUIRE_SOURCE: &str = include_str!("../scripts/acquire.lua");

/// The acquire script's reply and, with `replica_acks`, the reply of the `WAIT` that followed it
/// on the same connection.
pub(crate) struct Acquired {
    pub reply: Value,
    waited: Option<Value>,
}

/// Run the acquire script for `lock` on `conn`; with `replica_acks`, in one pipeline with its
/// `WAIT`. Errors are those of the script (the `WAIT`'s own are checked by [`confirm_grant`]).
/// `queue_ms`: fair mode's stay in the queue when the lock is held (never with `replica_acks`).
pub(crate) async fn acquire(lock: &LockInner, conn: &Conn, queue_ms: Option<u64>) -> RedisResult<Acquired> {
    let opts = &lock.client.inner.opts;
    // On NOSCRIPT, send the script itself (EVAL also caches it on that node for the next
    // EVALSHA). The hot connection and pipelines get no automatic SCRIPT LOAD.
    for verb in ["EVALSHA", "EVAL"] {
        let script = || {
            let mut script = redis::cmd(verb);
            script.arg(if verb == "EVAL" { ACQUIRE_SOURCE } else { scripts::ACQUIRE.get_hash() });
            let k = &lock.keys;
            script.arg(if queue_ms.is_some() { 4 } else { 2 }).arg(&k.hold).arg(&k.fence);
            if queue_ms.is_some() {
                script.arg(&k.queue).arg(&k.waiters);
            }
            script
                .arg(&*lock.token)
                .arg(timing::millis(lock.ttl))
                .arg(timing::millis(opts.fence_retention))
                .arg(opts.max_reentrancy);
            if let Some(ms) = queue_ms {
                script.arg(ms);
                let offer = timing::grant_offer(lock.ttl);
                if offer < lock.ttl {
                    // ARGV[6], ARGV[7] (Redlock's) empty; ARGV[8]: a hand-over's lease is an offer.
                    script.arg("").arg("").arg(timing::millis(offer));
                }
            }
            script
        };
        let Some(acks) = opts.replica_acks else {
            let built;
            let req = if verb == "EVALSHA" && queue_ms.is_none() {
                lock.acquire_request.get_or_init(|| Request::new(script()))
            } else {
                built = Request::new(script());
                &built
            };
            let hot = lock.client.inner.hot.as_ref();
            let waited_on = lock.client.waited_on(&lock.keys.channel);
            match HotConn::query(hot, conn, &lock.pin, req, waited_on).await {
                Err(e) if verb == "EVALSHA" && scripts::is_noscript(&e) => continue,
                r => return Ok(Acquired { reply: r?, waited: None }),
            }
        };
        let script = script();
        let mut wait = redis::cmd("WAIT");
        wait.arg(acks.replicas).arg(timing::millis(acks.timeout).max(1));
        let mut pipe = redis::pipe();
        pipe.add_command(script).add_command(wait);
        // Behind an undo or release of this handle still unanswered on the hot connection, not
        // ahead of it (that undo would delete this grant).
        HotConn::settle_pin(lock.client.inner.hot.as_ref(), conn, &lock.pin).await?;
        lock.pin.multiplexed();
        let mut replies = Box::pin(on_one_connection(conn, &pipe, &lock.keys.hold)).await?.into_iter();
        lock.pin.answered();
        let (Some(reply), Some(waited), None) = (replies.next(), replies.next(), replies.next()) else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the acquire pipeline did not get two replies",
            )));
        };
        match reply {
            Value::ServerError(e) => {
                let e = redis::RedisError::from(e);
                if verb == "EVALSHA" && scripts::is_noscript(&e) {
                    continue; // the script did not run, so the WAIT has nothing to confirm
                }
                return Err(e);
            }
            reply => return Ok(Acquired { reply, waited: Some(waited) }),
        }
    }
    Err(redis::RedisError::from((redis::ErrorKind::Client, "NOSCRIPT after EVAL")))
}

/// `pipe` written as one unit on one connection: the single server's (or the current master's,
/// through Sentinel), or on a cluster the connection to the master of `key`'s slot. Never split
/// (the cluster connection's own pipeline helper, `crate::cluster::req_commands`, spreads a
/// pipeline's commands over their slots' nodes, which would send a key-less `WAIT` anywhere).
async fn on_one_connection(conn: &Conn, pipe: &redis::Pipeline, key: &[u8]) -> RedisResult<Vec<Value>> {
    match conn {
        #[cfg(feature = "cluster")]
        Conn::Cluster(c) => crate::cluster::req_pipeline_on_slot_master(&mut c.cmd.clone(), pipe, key).await,
        _ => {
            let _ = key;
            conn.clone().req_packed_commands(pipe, 0, pipe.len()).await
        }
    }
}

/// `Ok` unless the acquire granted and fewer replicas than asked acknowledged it:
/// [`ErrorKind::NotReplicated`], or the `WAIT`'s own error.
pub(crate) fn confirm_grant(client: &Client, acquired: &Acquired) -> Result<()> {
    let Some(acks) = client.inner.opts.replica_acks else { return Ok(()) };
    let granted =
        matches!(&acquired.reply, Value::Array(items) if matches!(items.first(), Some(Value::Int(1))));
    if !granted {
        return Ok(());
    }
    let n = match &acquired.waited {
        Some(Value::Int(n)) => *n,
        Some(Value::ServerError(e)) => return Err(client.error(&redis::RedisError::from(e.clone()))),
        Some(other) => {
            return Err(Error::new(ErrorKind::Protocol, format!("unexpected reply to WAIT: {other:?}")));
        }
        None => return Err(Error::new(ErrorKind::Internal, "replica_acks set but no WAIT was sent")),
    };
    if n < i64::from(acks.replicas) {
        return Err(Error::new(
            ErrorKind::NotReplicated,
            format!(
                "{n} of {} replicas acknowledged the grant within {:?}; the grant was undone",
                acks.replicas, acks.timeout
            ),
        ));
    }
    Ok(())
}

static KEEP_REFUSED_GRANTS: AtomicBool = AtomicBool::new(false);

/// Whether a grant [`confirm_grant`] refused is undone (always, unless a test's control turned
/// that off with [`keep_refused_grants_for_tests`]).
pub(crate) fn undo_refused_grants() -> bool {
    !KEEP_REFUSED_GRANTS.load(Ordering::SeqCst)
}

/// **Tests only; makes the library unsafe.** While `keep` is true, a grant refused for missing
/// replica acknowledgements is still reported as `NotReplicated` but is *not* undone, in every
/// client of the process. It exists so a test can show that its "the lock is not left held"
/// check catches a grant left behind (core/tests/cluster_replica_ack.rs).
#[doc(hidden)]
pub fn keep_refused_grants_for_tests(keep: bool) {
    KEEP_REFUSED_GRANTS.store(keep, Ordering::SeqCst);
}
