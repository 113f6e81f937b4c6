//! Argument conversion: JS milliseconds, names and option objects to core types.
//! Only checking and conversion; every rule about timing lives in the core.

use std::time::Duration;

use ferrolock::{Error, ErrorKind, Result};
use napi::bindgen_prelude::{Buffer, Either, Utf16String};
use napi_derive::napi;

/// A duration given in milliseconds: finite and not negative. Range rules (minimum TTL, one
/// year maximum) are the core's.
pub fn millis(what: &str, ms: f64) -> Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(Error::new(
            ErrorKind::InvalidDuration,
            format!("{what}: must be a finite number of milliseconds >= 0"),
        ));
    }
    Duration::try_from_secs_f64(ms / 1000.0)
        .map_err(|_| Error::new(ErrorKind::InvalidDuration, format!("{what}: out of range")))
}

pub fn opt_millis(what: &str, ms: Option<f64>) -> Result<Option<Duration>> {
    ms.map(|v| millis(what, v)).transpose()
}

/// Milliseconds as a JS number. From whole nanoseconds: `as_secs_f64() * 1000.0` rounded a
/// duration made from a whole number of milliseconds to a neighbouring float (1001 ms read back
/// as 1000.9999999999999).
pub fn to_millis(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// A lock name: a string (UTF-8 on the wire; lone surrogates are refused, not replaced) or a
/// Buffer (any bytes).
pub fn name(name: Either<Utf16String, Buffer>) -> Result<Vec<u8>> {
    match name {
        Either::A(s) => String::from_utf16(&s).map(String::into_bytes).map_err(|_| {
            Error::new(ErrorKind::InvalidName, "lock name is not well-formed UTF-16 (lone surrogate)")
        }),
        Either::B(b) => Ok(b.to_vec()),
    }
}

/// Options of `Client.connect`. Durations are milliseconds; omitted fields keep the core's
/// defaults (see docs/PROTOCOL.md and the core's `ClientOptions`).
#[napi(object)]
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// TCP/TLS connect and handshake timeout. Default 2000.
    pub connect_timeout: Option<f64>,
    /// Timeout of each reply. Default 1000.
    pub response_timeout: Option<f64>,
    /// Key prefix; keys are `<prefix>{<name>}` plus suffixes. Default `"ferrolock:"`.
    pub prefix: Option<String>,
    /// Longest accepted lock name in bytes. Default 65536.
    pub max_name_len: Option<f64>,
    /// Clock drift allowance: `drift = ttl × driftFactor + driftMin`. Default 0.01.
    pub drift_factor: Option<f64>,
    /// Fixed part of the drift allowance. Default 2.
    pub drift_min: Option<f64>,
    /// Lease of locks made without an explicit `ttl` (renewed by the watchdog). Default 30000.
    pub watchdog_ttl: Option<f64>,
    /// How long a lock's last fencing token is kept after its last grant. Default 7 days.
    pub fence_retention: Option<f64>,
    /// Deepest re-entry accepted for one handle. Default 1024.
    pub max_reentrancy: Option<f64>,
    /// How long an idle release-channel subscription is kept. Default 10000.
    pub subscription_linger: Option<f64>,
    /// Redlock only: how many masters must agree. Default a strict majority (`N / 2 + 1`); an
    /// even number of masters needs it set.
    pub redlock_quorum: Option<f64>,
    /// Redlock only: how long one master may take per request of a quorum round. Default 50.
    pub redlock_node_timeout: Option<f64>,
    /// Redlock only: random pause bound after a split vote or an unreachable quorum. Default 100.
    pub redlock_retry_jitter: Option<f64>,
    /// Redlock only: most requests in flight on one master's connection. Default 64.
    pub redlock_max_inflight: Option<f64>,
    /// Certificates for `rediss://` URLs (the server's chain and host name are always verified).
    pub tls: Option<TlsOptions>,
    /// Replica acknowledgement of every grant (single server, Sentinel or Cluster): after a grant,
    /// `WAIT replicas timeout`; fewer acknowledgements undo it and reject with
    /// `NOT_REPLICATED`. See docs/GUARANTEES.md.
    pub replica_acks: Option<ReplicaAcksOptions>,
}

/// `replicaAcks` of `Client.connect`.
#[napi(object)]
#[derive(Debug, Clone, Copy)]
pub struct ReplicaAcksOptions {
    /// Replicas that must acknowledge each grant (at least 1).
    pub replicas: f64,
    /// Longest wait for them, in milliseconds (at least 1, at most 1000, below `responseTimeout`).
    pub timeout: f64,
}

/// PEM texts for `rediss://`, as for Node's own `tls.connect` (e.g.
/// `fs.readFileSync('ca.crt', 'utf8')`). Refused with a `redis://` URL.
#[napi(object)]
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// CA certificates to trust instead of the system store.
    pub ca: Option<String>,
    /// Client certificate chain for mutual TLS (needs `key`).
    pub cert: Option<String>,
    /// Private key of the client certificate (never printed).
    pub key: Option<String>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca.as_ref().map(|_| "set"))
            .field("cert", &self.cert.as_ref().map(|_| "set"))
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

fn whole(what: &str, v: f64, max: f64) -> Result<f64> {
    if v.is_finite() && v.fract() == 0.0 && (1.0..=max).contains(&v) {
        Ok(v)
    } else {
        Err(Error::new(ErrorKind::InvalidConfig, format!("{what}: must be a whole number from 1 to {max}")))
    }
}

impl ClientOptions {
    pub fn to_core(&self) -> Result<ferrolock::ClientOptions> {
        let mut o = ferrolock::ClientOptions::default();
        let set = |slot: &mut Duration, what: &str, v: Option<f64>| -> Result<()> {
            if let Some(d) = opt_millis(what, v)? {
                *slot = d;
            }
            Ok(())
        };
        set(&mut o.connect_timeout, "connectTimeout", self.connect_timeout)?;
        set(&mut o.response_timeout, "responseTimeout", self.response_timeout)?;
        set(&mut o.drift_min, "driftMin", self.drift_min)?;
        set(&mut o.watchdog_ttl, "watchdogTtl", self.watchdog_ttl)?;
        set(&mut o.fence_retention, "fenceRetention", self.fence_retention)?;
        set(&mut o.subscription_linger, "subscriptionLinger", self.subscription_linger)?;
        set(&mut o.redlock_node_timeout, "redlockNodeTimeout", self.redlock_node_timeout)?;
        set(&mut o.redlock_retry_jitter, "redlockRetryJitter", self.redlock_retry_jitter)?;
        if let Some(v) = self.redlock_quorum {
            o.redlock_quorum = Some(whole("redlockQuorum", v, 1024.0)? as usize);
        }
        if let Some(v) = self.redlock_max_inflight {
            o.redlock_max_inflight = whole("redlockMaxInflight", v, 1_000_000.0)? as usize;
        }
        if let Some(p) = &self.prefix {
            o.prefix = p.clone();
        }
        if let Some(v) = self.max_name_len {
            o.max_name_len = whole("maxNameLen", v, 512.0 * 1024.0 * 1024.0)? as usize;
        }
        if let Some(v) = self.drift_factor {
            o.drift_factor = v; // range checked by the core
        }
        if let Some(v) = self.max_reentrancy {
            o.max_reentrancy = whole("maxReentrancy", v, f64::from(u32::MAX))? as u32;
        }
        if let Some(a) = self.replica_acks {
            let timeout = millis("replicaAcks.timeout", a.timeout)?;
            o.replica_acks = Some(ferrolock::ReplicaAcks::new(
                whole("replicaAcks.replicas", a.replicas, 1024.0)? as u32,
                timeout,
            ));
        }
        if let Some(t) = &self.tls {
            o.tls.root_certs_pem = t.ca.clone().map(String::into_bytes);
            o.tls.client_cert_pem = t.cert.clone().map(String::into_bytes);
            o.tls.client_key_pem = t.key.clone().map(String::into_bytes);
        }
        Ok(o)
    }
}

/// Options of `client.lock`.
#[napi(object)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LockOptions {
    /// Lease in milliseconds. Omitted: the client's `watchdogTtl`, renewed by the watchdog.
    pub ttl: Option<f64>,
    /// Renew the lease in the background until release. Default: renew exactly when `ttl` is
    /// omitted.
    pub renew: Option<bool>,
    /// Fair mode: waiters queue on the server and each release hands the lock to the oldest one
    /// (first come, first served). Not with Redlock or `replicaAcks`. Default false.
    pub fair: Option<bool>,
}

impl LockOptions {
    pub fn to_core(self) -> Result<ferrolock::LockOptions> {
        let ttl = opt_millis("ttl", self.ttl)?;
        let mut o = ferrolock::LockOptions::default();
        o.ttl = ttl;
        o.renew = self.renew;
        Ok(o.with_fair(self.fair.unwrap_or(false)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_rejects_what_is_not_a_duration() {
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300] {
            assert_eq!(millis("t", bad).map_err(|e| e.kind()), Err(ErrorKind::InvalidDuration), "{bad}");
        }
        assert_eq!(millis("t", 1500.0).ok(), Some(Duration::from_millis(1500)));
        assert_eq!(millis("t", 0.5).ok(), Some(Duration::from_micros(500)));
        assert_eq!(to_millis(Duration::from_millis(250)), 250.0);
        for ms in [1001.0, 1003.0, 2000.5, 0.5, 86_400_000.0] {
            assert_eq!(millis("t", ms).map(to_millis).ok(), Some(ms), "{ms}");
        }
    }

    #[test]
    fn options_map_to_core_fields() {
        let o = ClientOptions { watchdog_ttl: Some(1000.0), max_reentrancy: Some(3.0), ..Default::default() };
        let c = o.to_core().ok();
        assert_eq!(c.as_ref().map(|c| (c.watchdog_ttl, c.max_reentrancy)), Some((Duration::from_secs(1), 3)));
        let bad = ClientOptions { max_reentrancy: Some(0.5), ..Default::default() };
        assert_eq!(bad.to_core().err().map(|e| e.kind()), Some(ErrorKind::InvalidConfig));
        let l = LockOptions { ttl: Some(-5.0), renew: None, fair: None };
        assert_eq!(l.to_core().err().map(|e| e.kind()), Some(ErrorKind::InvalidDuration));
    }
}
