//! Replica acknowledgement of grants ([`crate::ClientOptions::replica_acks`]).
//!
//! After the acquire script grants, `WAIT replicas timeout` runs on the same connection: `WAIT`
//! counts the replicas that acknowledged this connection's latest write, so it must follow the
//! grant on the connection that sent it. The caller undoes a grant this refuses (the same
//! compare-and-delete as for an acquire of unknown outcome). See docs/GUARANTEES.md.

use redis::Value;
use redis::aio::ConnectionLike;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::timing;

/// `Ok` unless `reply` (the acquire script's) is a grant and fewer replicas than asked
/// acknowledged it: [`ErrorKind::NotReplicated`], or the `WAIT`'s own connection error.
pub(crate) async fn confirm_grant<C>(client: &Client, conn: &C, reply: &Value) -> Result<()>
where
    C: ConnectionLike + Clone + Send,
{
    let Some(acks) = client.inner.opts.replica_acks else { return Ok(()) };
    let granted = matches!(reply, Value::Array(items) if matches!(items.first(), Some(Value::Int(1))));
    if !granted {
        return Ok(());
    }
    let n: i64 = redis::cmd("WAIT")
        .arg(acks.replicas)
        .arg(timing::millis(acks.timeout).max(1))
        .query_async(&mut conn.clone())
        .await
        .map_err(|e| client.error(&e))?;
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
