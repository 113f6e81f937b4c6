//! Client and lock options, validated before any I/O.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

/// The longest lease or wait accepted (one year): anything longer is a unit mistake.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Options for [`crate::Client::connect`]. Every timeout is set on purpose, never left to the driver.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long to wait for a TCP/TLS connection and handshake, per attempt. Default 2 s.
    /// Connecting makes up to four attempts (20 to 500 ms apart), so a server that takes the
    /// connection but never answers is reported as `TIMEOUT` after about four times this.
    pub connect_timeout: Duration,
    /// How long to wait for any one reply. A command that times out may still have run on the
    /// server: acquisitions that time out are followed by a compare-and-delete. Default 1 s.
    /// Once connected, it bounds each request whole, including a wait for the connection to be
    /// set up again after it broke (and the hot path's connect: docs/CONNECTIONS.md).
    /// Redlock bounds each request to a master by `redlock_node_timeout` instead.
    pub response_timeout: Duration,
    /// Key prefix; keys are `<prefix>{<name>}` plus suffixes. Default `"ferrolock:"`.
    pub prefix: String,
    /// Longest accepted lock name in bytes. Default 64 KiB.
    pub max_name_len: usize,
    /// Clock drift allowance: `drift = ttl × drift_factor + drift_min`. Default 0.01.
    pub drift_factor: f64,
    /// Fixed part of the drift allowance. Default 2 ms.
    pub drift_min: Duration,
    /// Lease used by the watchdog when a lock is created without an explicit TTL. Default 30 s.
    pub watchdog_ttl: Duration,
    /// How long a lock's last fencing value is kept after its last grant. Default 7 days.
    pub fence_retention: Duration,
    /// Deepest re-entry accepted for one handle. Default 1024.
    pub max_reentrancy: u32,
    /// How long a release-channel subscription is kept after its last waiter left, so that
    /// repeated contention does not pay SUBSCRIBE/UNSUBSCRIBE each time (it goes at most a
    /// quarter of this, or 100 ms, later). Default 10 s.
    pub subscription_linger: Duration,
    /// Redlock only: how many masters must agree (`None`: a strict majority, `N / 2 + 1`; an even
    /// `N` needs an explicit value). Must be more than `N / 2`, at most `N`.
    pub redlock_quorum: Option<usize>,
    /// Redlock only: how long one master may take to answer one request of a quorum round. Keep
    /// it far below the TTL. Default 50 ms.
    pub redlock_node_timeout: Duration,
    /// Redlock only: after a split vote (no majority for anyone) or an unreachable quorum, wait a
    /// random time in `[0, redlock_retry_jitter]` before the next round. Default 100 ms.
    pub redlock_retry_jitter: Duration,
    /// Redlock only: most requests in flight on one master's connection; beyond it new work is
    /// shed (counted as that master's "no"). Default 64.
    pub redlock_max_inflight: usize,
    /// Certificates for `rediss://` servers. By default the server's chain is checked against
    /// the system's trust store and its name against the URL's host; there is no way to turn
    /// verification off (give the server's CA in [`TlsOptions::root_certs_pem`] instead).
    pub tls: TlsOptions,
    /// Replica acknowledgement of every grant (single server, Sentinel or Cluster; not Redlock):
    /// the acquire script and `WAIT replicas timeout` are sent as one pipeline on one connection
    /// (on a cluster, to the master of the lock's slot), and a grant that fewer replicas
    /// acknowledged is undone (compare-and-delete) and reported as
    /// [`ErrorKind::NotReplicated`]. `None` (default): no `WAIT`. See docs/GUARANTEES.md for what
    /// it does and does not guarantee.
    pub replica_acks: Option<ReplicaAcks>,
}

/// How many replicas must acknowledge a grant, and how long to wait for them
/// ([`ClientOptions::replica_acks`]).
///
/// The `WAIT` runs on the client's shared connection: it does not block the server for other
/// clients, but replies to this client's later commands (other locks' acquires, renewals) queue
/// behind it for up to `timeout` when a replica is missing. Hence `timeout` must be short: more
/// than zero (`WAIT 0` would block forever), less than the response timeout, at most 1 s.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAcks {
    /// Replicas that must acknowledge (at least 1).
    pub replicas: u32,
    /// Longest wait for them (the `WAIT` timeout).
    pub timeout: Duration,
}

impl ReplicaAcks {
    /// `replicas` acknowledgements within `timeout`.
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        ReplicaAcks { replicas, timeout }
    }

    /// The longest accepted `timeout`.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(1);

    fn validate(&self, response_timeout: Duration) -> Result<()> {
        if self.replicas == 0 {
            return Err(Error::new(ErrorKind::InvalidConfig, "replica_acks: replicas must be at least 1"));
        }
        if self.timeout < Duration::from_millis(1) || self.timeout > Self::MAX_TIMEOUT {
            return Err(Error::invalid_duration(
                "replica_acks timeout",
                "must be at least 1 ms and at most 1 s (it holds up the shared connection)",
            ));
        }
        if self.timeout >= response_timeout {
            return Err(Error::invalid_duration(
                "replica_acks timeout",
                "must be less than response_timeout (the reply to WAIT comes after it)",
            ));
        }
        Ok(())
    }
}

/// TLS settings for `rediss://` URLs (rustls; certificate chain and host name always verified).
///
/// Setting any field with a plain `redis://` URL is an [`ErrorKind::InvalidConfig`] error, so a
/// connection the caller meant to protect never goes out in clear text.
#[non_exhaustive]
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// PEM certificates of the CAs to trust *instead of* the system's trust store.
    pub root_certs_pem: Option<Vec<u8>>,
    /// PEM client certificate chain for mutual TLS (needs `client_key_pem`).
    pub client_cert_pem: Option<Vec<u8>>,
    /// PEM private key of the client certificate (never printed).
    pub client_key_pem: Option<Vec<u8>>,
}

impl TlsOptions {
    /// Trust only the CAs in the PEM file at `path` (e.g. `ca.crt` of a private CA).
    pub fn with_root_ca_file(mut self, path: impl AsRef<std::path::Path>) -> Result<Self> {
        self.root_certs_pem = Some(read_pem(path.as_ref(), "CA certificate")?);
        Ok(self)
    }

    /// Present the client certificate and key in these PEM files (mutual TLS).
    pub fn with_client_cert_files(
        mut self,
        cert: impl AsRef<std::path::Path>,
        key: impl AsRef<std::path::Path>,
    ) -> Result<Self> {
        self.client_cert_pem = Some(read_pem(cert.as_ref(), "client certificate")?);
        self.client_key_pem = Some(read_pem(key.as_ref(), "client key")?);
        Ok(self)
    }

    /// Whether any field is set.
    pub fn is_set(&self) -> bool {
        self.root_certs_pem.is_some() || self.client_cert_pem.is_some() || self.client_key_pem.is_some()
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::new(ErrorKind::InvalidConfig, m.to_owned()));
        if self.client_cert_pem.is_some() != self.client_key_pem.is_some() {
            return bad("tls: a client certificate needs its key, and a key its certificate");
        }
        for (what, pem) in [
            ("root_certs_pem", &self.root_certs_pem),
            ("client_cert_pem", &self.client_cert_pem),
            ("client_key_pem", &self.client_key_pem),
        ] {
            if pem.as_ref().is_some_and(|pem| !pem.windows(11).any(|w| w == b"-----BEGIN ")) {
                return bad(&format!("tls: {what} is not PEM (no -----BEGIN line)"));
            }
        }
        if let (Some(cert), Some(key)) = (&self.client_cert_pem, &self.client_key_pem) {
            client_key_matches(cert, key)?;
        }
        Ok(())
    }
}

/// A client key that parses but belongs to another certificate would otherwise fail only at
/// connect time, as the driver's `InvalidClientConfig`; the same mistake as an unreadable key, so
/// the same `Tls` error here, before any I/O. A pair that does not parse is left to the driver,
/// whose message names what it could not read.
fn client_key_matches(cert: &[u8], key: &[u8]) -> Result<()> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let chain = CertificateDer::pem_slice_iter(cert).collect::<std::result::Result<Vec<_>, _>>();
    let (Ok(chain), Ok(key)) = (chain, PrivateKeyDer::from_pem_slice(key)) else { return Ok(()) };
    let Ok(signer) = rustls::crypto::ring::sign::any_supported_type(&key) else { return Ok(()) };
    match rustls::sign::CertifiedKey::new(chain, signer).keys_match() {
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => Err(Error::new(
            ErrorKind::Tls,
            "unusable TLS certificates or key: the client key does not belong to the client certificate",
        )),
        _ => Ok(()),
    }
}

/// Read a PEM file of at most [`MAX_PEM`] bytes (`/dev/zero` given by mistake is refused rather
/// than read until memory runs out). A pipe is read as a file (`--cacert <(…)` in a shell).
fn read_pem(path: &std::path::Path, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let fail = |why: &dyn std::fmt::Display| {
        Error::new(ErrorKind::InvalidConfig, format!("cannot read the {what} file {}: {why}", path.display()))
    };
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM + 1).read_to_end(&mut pem))
        .map_err(|e| fail(&e))?;
    if pem.len() as u64 > MAX_PEM {
        return Err(fail(&format!("larger than {} MiB", MAX_PEM >> 20)));
    }
    Ok(pem)
}

/// The largest PEM file read (a bundle of every public CA is about 200 KiB).
const MAX_PEM: u64 = 16 << 20;

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |v: &Option<Vec<u8>>| if v.is_some() { "set" } else { "unset" };
        let key = if self.client_key_pem.is_some() { "<redacted>" } else { "unset" };
        f.debug_struct("TlsOptions")
            .field("root_certs_pem", &shown(&self.root_certs_pem))
            .field("client_cert_pem", &shown(&self.client_cert_pem))
            .field("client_key_pem", &key)
            .finish()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(1),
            prefix: "ferrolock:".to_owned(),
            max_name_len: 64 * 1024,
            drift_factor: 0.01,
            drift_min: Duration::from_millis(2),
            watchdog_ttl: Duration::from_secs(30),
            fence_retention: Duration::from_secs(7 * 24 * 3600),
            max_reentrancy: 1024,
            subscription_linger: Duration::from_secs(10),
            redlock_quorum: None,
            redlock_node_timeout: Duration::from_millis(50),
            redlock_retry_jitter: Duration::from_millis(100),
            redlock_max_inflight: 64,
            tls: TlsOptions::default(),
            replica_acks: None,
        }
    }
}

impl ClientOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::new(ErrorKind::InvalidConfig, m.to_owned()));
        if self.prefix.contains(['{', '}']) {
            return bad("prefix must not contain '{' or '}' (they delimit the hash tag)");
        }
        if self.max_name_len == 0 {
            return bad("max_name_len must be at least 1");
        }
        if !(self.drift_factor.is_finite() && (0.0..0.5).contains(&self.drift_factor)) {
            return bad("drift_factor must be a finite number in [0, 0.5)");
        }
        if self.max_reentrancy == 0 {
            return bad("max_reentrancy must be at least 1");
        }
        for (name, d) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("fence_retention", self.fence_retention),
        ] {
            if d.is_zero() || d > MAX_DURATION {
                return Err(Error::invalid_duration(name, "must be > 0 and at most one year"));
            }
        }
        if self.drift_min > Duration::from_secs(60) {
            return bad("drift_min above one minute");
        }
        if self.subscription_linger > MAX_DURATION {
            return Err(Error::invalid_duration("subscription_linger", "at most one year"));
        }
        // The Redlock settings are checked for every client, so that a value a binding passes
        // to both kinds of client is refused the same way by each.
        if self.redlock_node_timeout.is_zero() || self.redlock_node_timeout > Duration::from_secs(60) {
            return Err(Error::invalid_duration(
                "redlock_node_timeout",
                "must be > 0 and at most one minute",
            ));
        }
        if self.redlock_retry_jitter > Duration::from_secs(60) {
            return Err(Error::invalid_duration("redlock_retry_jitter", "at most one minute"));
        }
        if self.redlock_max_inflight == 0 {
            return bad("redlock_max_inflight must be at least 1");
        }
        crate::timing::check_ttl(self, "watchdog_ttl", self.watchdog_ttl)?;
        if let Some(acks) = &self.replica_acks {
            acks.validate(self.response_timeout)?;
        }
        self.tls.validate()
    }

    /// Redlock settings for `n` masters; returns the quorum.
    pub(crate) fn validate_redlock(&self, n: usize) -> Result<usize> {
        let bad = |m: String| Err(Error::new(ErrorKind::InvalidConfig, m));
        if n == 0 {
            return bad("Redlock needs at least one master URL".to_owned());
        }
        let quorum = match self.redlock_quorum {
            Some(q) => q,
            None if n.is_multiple_of(2) => {
                return bad(format!(
                    "{n} masters is an even number: set redlock_quorum explicitly (more than {})",
                    n / 2
                ));
            }
            None => n / 2 + 1,
        };
        if quorum <= n / 2 || quorum > n {
            return bad(format!(
                "redlock_quorum {quorum} for {n} masters: it must be a strict majority (more than {}, at most {n})",
                n / 2
            ));
        }
        if self.replica_acks.is_some() {
            return bad(
                "replica_acks applies to one master and its replicas; Redlock's masters are independent \
                 (leave it unset)"
                    .to_owned(),
            );
        }
        Ok(quorum)
    }
}

/// Options for one lock: its lease and whether the watchdog renews it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockOptions {
    /// Lease length; `None` uses the client's `watchdog_ttl`.
    pub ttl: Option<Duration>,
    /// Keep the lease alive in the background until release (`None`: renew exactly when `ttl`
    /// is `None`, i.e. a lock without an explicit lease is kept alive by the watchdog).
    pub renew: Option<bool>,
    /// Fair mode (docs/PROTOCOL.md "Fair mode"): a waiter joins a queue kept by the server, and
    /// each release hands the lock straight to the oldest waiter, which learns it from the
    /// release message without another round trip. Single node, Sentinel and Cluster only (not
    /// Redlock, not with `replica_acks`). Contenders of one name should agree on the mode: a
    /// non-fair contender is safe but may barge.
    pub fair: bool,
}

impl LockOptions {
    /// A fixed lease: the hold expires `ttl` after each acquire or extend, with no renewal.
    pub fn lease(ttl: Duration) -> Self {
        LockOptions { ttl: Some(ttl), renew: Some(false), fair: false }
    }

    /// A lease of `ttl` renewed by the watchdog every `ttl / 3` until release.
    pub fn renewing(ttl: Duration) -> Self {
        LockOptions { ttl: Some(ttl), renew: Some(true), fair: false }
    }

    /// The same options in fair mode (`fair = true`) or not.
    pub fn with_fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// Check `name` and these options against a client's options without connecting: what
    /// [`crate::Client::lock`] checks first (name length, lease range), so that a tool can
    /// refuse bad input before it opens a connection. (Fair mode on a Redlock client or with
    /// replica acknowledgement is only known once connected.)
    pub fn check(&self, name: &[u8], client: &ClientOptions) -> Result<()> {
        crate::keys::Keys::new(client, name)?;
        self.resolve(client).map(|_| ())
    }

    pub(crate) fn resolve(&self, client: &ClientOptions) -> Result<(Duration, bool)> {
        let ttl = self.ttl.unwrap_or(client.watchdog_ttl);
        crate::timing::check_ttl(client, "ttl", ttl)?;
        Ok((ttl, self.renew.unwrap_or(self.ttl.is_none())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redlock_quorum_rules() {
        let o = ClientOptions::default();
        assert_eq!(o.validate_redlock(1).unwrap(), 1);
        assert_eq!(o.validate_redlock(3).unwrap(), 2);
        assert_eq!(o.validate_redlock(5).unwrap(), 3);
        for n in [0, 2, 4] {
            assert_eq!(o.validate_redlock(n).unwrap_err().kind(), ErrorKind::InvalidConfig, "n = {n}");
        }
        let with = |q| ClientOptions { redlock_quorum: Some(q), ..ClientOptions::default() };
        assert_eq!(with(3).validate_redlock(4).unwrap(), 3);
        assert_eq!(with(4).validate_redlock(4).unwrap(), 4);
        for (q, n) in [(2, 4), (5, 4), (0, 1), (2, 5)] {
            assert_eq!(
                with(q).validate_redlock(n).unwrap_err().kind(),
                ErrorKind::InvalidConfig,
                "{q} of {n}"
            );
        }
    }

    #[test]
    fn out_of_range_durations_are_refused_for_every_client() {
        let d = ClientOptions::default;
        for (o, what) in [
            (ClientOptions { redlock_node_timeout: Duration::ZERO, ..d() }, "redlock_node_timeout"),
            (ClientOptions { redlock_retry_jitter: Duration::from_secs(61), ..d() }, "redlock_retry_jitter"),
            (ClientOptions { subscription_linger: MAX_DURATION * 2, ..d() }, "subscription_linger"),
        ] {
            let e = o.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidDuration, "{what}");
            assert!(e.message().contains(what), "{e}");
        }
        let o = ClientOptions { redlock_max_inflight: 0, ..d() };
        assert_eq!(o.validate().unwrap_err().kind(), ErrorKind::InvalidConfig);
        assert!(d().validate().is_ok());
    }

    /// The defaults docs/GUARANTEES.md ("Defaults") and docs/PROTOCOL.md promise, which every
    /// binding inherits: a changed default passed every other test (mutation review).
    #[test]
    fn the_defaults_are_the_documented_ones() {
        let o = ClientOptions::default();
        assert_eq!(o.connect_timeout, Duration::from_secs(2));
        assert_eq!(o.response_timeout, Duration::from_secs(1));
        assert_eq!(o.prefix, "ferrolock:");
        assert_eq!(o.max_name_len, 64 * 1024);
        assert!((o.drift_factor - 0.01).abs() < 1e-12, "{}", o.drift_factor);
        assert_eq!(o.drift_min, Duration::from_millis(2));
        assert_eq!(o.watchdog_ttl, Duration::from_secs(30));
        assert_eq!(o.fence_retention, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(o.max_reentrancy, 1024);
        assert_eq!(o.subscription_linger, Duration::from_secs(10));
        assert_eq!(o.redlock_quorum, None);
        assert_eq!(o.redlock_node_timeout, Duration::from_millis(50));
        assert_eq!(o.redlock_retry_jitter, Duration::from_millis(100));
        assert_eq!(o.redlock_max_inflight, 64);
        assert!(!o.tls.is_set());
        assert_eq!(o.replica_acks, None);
    }

    /// `LockOptions::renew` left unset renews exactly the locks without an explicit lease: a
    /// lock given a `ttl` keeps that fixed lease (it was renewed for good with the default
    /// flipped, and no test noticed).
    #[test]
    fn only_a_lock_without_a_lease_is_renewed_by_default() {
        let c = ClientOptions::default();
        let ttl = Duration::from_secs(5);
        assert_eq!(LockOptions::default().resolve(&c).unwrap(), (c.watchdog_ttl, true));
        let leased = LockOptions { ttl: Some(ttl), ..LockOptions::default() };
        assert_eq!(leased.resolve(&c).unwrap(), (ttl, false));
        assert_eq!(LockOptions::lease(ttl).resolve(&c).unwrap(), (ttl, false));
        assert_eq!(LockOptions::renewing(ttl).resolve(&c).unwrap(), (ttl, true));
        let unrenewed = LockOptions { ttl: None, renew: Some(false), fair: false };
        assert_eq!(unrenewed.resolve(&c).unwrap(), (c.watchdog_ttl, false));
    }

    /// Each documented bound on its documented side: `drift_factor` in [0, 0.5), a prefix
    /// without `{` or `}` (docs/PROTOCOL.md), a `replica_acks` timeout below the response
    /// timeout.
    #[test]
    fn bounds_are_on_the_documented_side() {
        let d = ClientOptions::default;
        for ok in [0.0, 0.25, 0.49] {
            assert!(ClientOptions { drift_factor: ok, ..d() }.validate().is_ok(), "{ok}");
        }
        for bad in [0.5, 0.75, -0.01, f64::NAN, f64::INFINITY] {
            let e = ClientOptions { drift_factor: bad, ..d() }.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{bad}");
        }
        for prefix in ["a{", "a}", "}", "{", "x}:"] {
            let e = ClientOptions { prefix: prefix.to_owned(), ..d() }.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{prefix}");
        }
        assert!(ClientOptions { prefix: String::new(), ..d() }.validate().is_ok());
        let acks = |ms| ClientOptions {
            replica_acks: Some(ReplicaAcks::new(1, Duration::from_millis(ms))),
            response_timeout: Duration::from_millis(500),
            ..d()
        };
        assert!(acks(499).validate().is_ok());
        assert_eq!(acks(500).validate().unwrap_err().kind(), ErrorKind::InvalidDuration);
    }
}
