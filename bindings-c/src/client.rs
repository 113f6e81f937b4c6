//! Client handles: one connection to a Redis server, shared by the locks made from it.

use std::ffi::c_char;
use std::time::Duration;

use ferrolock::{ClientOptions, ErrorKind, blocking};

use crate::boundary::{bytes, call, catch, non_null, utf8, write};
use crate::error::ferrolock_error;
use crate::handles::Table;
use crate::result::ferrolock_result;

/// A connection to one Redis server (opaque handle). Thread-safe: any thread may use it, also
/// concurrently. Made by ferrolock_client_new(), freed by ferrolock_client_free().
#[derive(Debug)]
pub struct ferrolock_client {
    _opaque: [u8; 0],
}

pub(crate) static CLIENTS: Table<blocking::Client> = Table::new("client");

/// Client options. Zero-initialise (`ferrolock_client_options o = {0};`) for the defaults:
/// every field left 0 (or NULL) keeps the core's default.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ferrolock_client_options {
    /// Connect (TCP/TLS + handshake) timeout in ms, per attempt (up to four); 0: 2000.
    pub connect_timeout_ms: u64,
    /// Timeout for any one reply in ms; 0: 1000. A timed-out acquire is undone by the library.
    pub response_timeout_ms: u64,
    /// Lease used for locks made without a TTL (renewed by the watchdog) in ms; 0: 30000.
    pub watchdog_ttl_ms: u64,
    /// Longest lock name in bytes; 0: 65536.
    pub max_name_len: usize,
    /// Deepest re-entry through one lock handle; 0: 1024.
    pub max_reentrancy: u32,
    /// Key prefix (UTF-8, `prefix_len` bytes, no `{` or `}`); NULL (with length 0): `"ferrolock:"`.
    /// A non-NULL empty string is no prefix at all (keys `{name}`), not the default: every
    /// client sharing a lock must use the same prefix.
    pub prefix: *const c_char,
    /// Length of `prefix` in bytes.
    pub prefix_len: usize,
    /// Redlock only: masters that must grant; 0: a strict majority (`N / 2 + 1`; an even `N`
    /// needs an explicit quorum).
    pub redlock_quorum: usize,
    /// Redlock only: per-master timeout in ms, far below the TTL; 0: 50.
    pub redlock_node_timeout_ms: u64,
    /// `rediss://` only: path of a PEM file with the CA certificates to trust instead of the
    /// system store (UTF-8, `tls_ca_file_len` bytes); NULL (with length 0): the system store.
    /// The server's chain and host name are always verified.
    pub tls_ca_file: *const c_char,
    /// Length of `tls_ca_file` in bytes.
    pub tls_ca_file_len: usize,
    /// `rediss://` only: PEM client certificate file for mutual TLS (needs `tls_key_file`).
    pub tls_cert_file: *const c_char,
    /// Length of `tls_cert_file` in bytes.
    pub tls_cert_file_len: usize,
    /// `rediss://` only: PEM private key file of the client certificate.
    pub tls_key_file: *const c_char,
    /// Length of `tls_key_file` in bytes.
    pub tls_key_file_len: usize,
    /// Replica acknowledgement (single server, Sentinel or Cluster): replicas that must
    /// acknowledge each grant (`WAIT`), else it is undone and ::FERROLOCK_RESULT_NOT_REPLICATED
    /// returned; 0: off. See docs/GUARANTEES.md.
    pub replica_acks: u32,
    /// With `replica_acks`: longest wait for the acknowledgements in ms (1 to 1000, below the
    /// response timeout); 0: 100.
    pub replica_acks_timeout_ms: u64,
    /// Clock drift allowed per lease, `ttl × drift_factor + drift_min` (docs/PROTOCOL.md): a
    /// finite number in [0, 0.5); 0: 0.01 (a tiny value such as 1e-9 stands for none).
    pub drift_factor: f64,
    /// Fixed part of the drift allowance in ms, at most 60000; 0: 2.
    pub drift_min_ms: u64,
    /// How long a lock's fence counter outlives its last grant in ms (its key's idle expiry;
    /// fencing tokens of a name rise across that gap only if it is longer); 0: 7 days.
    pub fence_retention_ms: u64,
    /// How long an idle release-channel subscription is kept in ms; 0: 10000.
    pub subscription_linger_ms: u64,
    /// Redlock only: bound of the random pause after a split vote or an unreachable quorum in
    /// ms, at most 60000; 0: 100.
    pub redlock_retry_jitter_ms: u64,
    /// Redlock only: most requests in flight on one master's connection; 0: 64.
    pub redlock_max_inflight: usize,
}

/// # Safety
/// `o.prefix` and each `o.tls_*_file` is NULL or valid for its `_len` bytes.
unsafe fn to_options(o: Option<&ferrolock_client_options>) -> Result<ClientOptions, ferrolock::Error> {
    let mut opts = ClientOptions::default();
    let Some(o) = o else { return Ok(opts) };
    let ms = |v: u64, d: Duration| if v == 0 { d } else { Duration::from_millis(v) };
    opts.connect_timeout = ms(o.connect_timeout_ms, opts.connect_timeout);
    opts.response_timeout = ms(o.response_timeout_ms, opts.response_timeout);
    opts.watchdog_ttl = ms(o.watchdog_ttl_ms, opts.watchdog_ttl);
    if o.max_name_len != 0 {
        opts.max_name_len = o.max_name_len;
    }
    if o.max_reentrancy != 0 {
        opts.max_reentrancy = o.max_reentrancy;
    }
    if o.redlock_quorum != 0 {
        opts.redlock_quorum = Some(o.redlock_quorum);
    }
    opts.redlock_node_timeout = ms(o.redlock_node_timeout_ms, opts.redlock_node_timeout);
    if o.drift_factor != 0.0 {
        opts.drift_factor = o.drift_factor; // NaN, infinite or out of range: refused by connect
    }
    opts.drift_min = ms(o.drift_min_ms, opts.drift_min);
    opts.fence_retention = ms(o.fence_retention_ms, opts.fence_retention);
    opts.subscription_linger = ms(o.subscription_linger_ms, opts.subscription_linger);
    opts.redlock_retry_jitter = ms(o.redlock_retry_jitter_ms, opts.redlock_retry_jitter);
    if o.redlock_max_inflight != 0 {
        opts.redlock_max_inflight = o.redlock_max_inflight;
    }
    if o.replica_acks != 0 {
        let timeout = ms(o.replica_acks_timeout_ms, Duration::from_millis(100));
        opts.replica_acks = Some(ferrolock::ReplicaAcks::new(o.replica_acks, timeout));
    }
    // NULL with length 0 is "not given"; NULL with a non-zero length is NULL_ARGUMENT (`utf8`).
    // SAFETY: forwarded contract.
    let optional = |p: *const c_char, len: usize, what: &str| -> Result<Option<&str>, ferrolock::Error> {
        if p.is_null() && len == 0 {
            Ok(None)
        } else {
            unsafe { utf8(p, len, what, ErrorKind::InvalidConfig) }.map(Some)
        }
    };
    if let Some(prefix) = optional(o.prefix, o.prefix_len, "prefix")? {
        opts.prefix = prefix.to_owned();
    }
    if let Some(ca) = optional(o.tls_ca_file, o.tls_ca_file_len, "tls_ca_file")? {
        opts.tls = opts.tls.with_root_ca_file(ca)?;
    }
    match (
        optional(o.tls_cert_file, o.tls_cert_file_len, "tls_cert_file")?,
        optional(o.tls_key_file, o.tls_key_file_len, "tls_key_file")?,
    ) {
        (None, None) => {}
        (Some(cert), Some(key)) => opts.tls = opts.tls.with_client_cert_files(cert, key)?,
        _ => {
            return Err(ferrolock::Error::new(
                ErrorKind::InvalidConfig,
                "tls_cert_file and tls_key_file go together",
            ));
        }
    }
    Ok(opts)
}

/// Connect to a Redis server.
///
/// @param url `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS),
///        `redis+unix:///path`, `redis+sentinel://host:port[,host:port…]/master-name[/db]` (the
///        master found through Sentinel, failovers followed) or
///        `redis+cluster://host:port[,host:port…]` (Redis Cluster seed nodes), as `url_len` bytes of UTF-8 (no NUL terminator needed; a NUL
///        inside is refused).
/// @param options NULL for the defaults.
/// @param out_client receives the new client on success.
/// @param out_error NULL, or receives an owned error on failure.
/// @return ::FERROLOCK_RESULT_OK, ::FERROLOCK_RESULT_INVALID_URL, ::FERROLOCK_RESULT_INVALID_CONFIG,
///         ::FERROLOCK_RESULT_CONNECTION, ::FERROLOCK_RESULT_AUTH, … Error messages never contain
///         the password.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_client_new(
    url: *const c_char,
    url_len: usize,
    options: *const ferrolock_client_options,
    out_client: *mut *mut ferrolock_client,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_client, "out_client")?;
            non_null(url, "url")?;
            let url = utf8(url, url_len, "url", ErrorKind::InvalidUrl)?;
            let opts = to_options(options.as_ref())?;
            let client = blocking::Client::connect(url, opts)?;
            write(out_client, CLIENTS.insert(client));
            Ok(())
        })
    }
}

/// Connect to `count` independent Redis masters for Redlock. The client is a
/// ::ferrolock_client like any other: locks made from it take, renew, extend and release on a
/// quorum of the masters (docs/REDLOCK.md), with the same fencing, reentrancy and loss signals.
///
/// @param urls `count` URLs (as for ferrolock_client_new()).
/// @param url_lens `count` lengths in bytes, or NULL when every URL is NUL-terminated.
/// @param options NULL for the defaults; `redlock_quorum` and `redlock_node_timeout_ms` apply.
/// @return ::FERROLOCK_RESULT_OK; ::FERROLOCK_RESULT_QUORUM_NOT_REACHED if fewer than a quorum
///         of masters can be reached now (the others are reconnected in the background once
///         connected); ::FERROLOCK_RESULT_INVALID_CONFIG for an even count without a quorum, a
///         quorum that is not a strict majority, or a master listed twice (the same host and
///         port, whatever the db or credentials: one server under two names, such as
///         `localhost` and `127.0.0.1`, is not detected);
///         ::FERROLOCK_RESULT_INVALID_URL, ::FERROLOCK_RESULT_NULL_ARGUMENT, …
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_client_new_redlock(
    urls: *const *const c_char,
    url_lens: *const usize,
    count: usize,
    options: *const ferrolock_client_options,
    out_client: *mut *mut ferrolock_client,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_client, "out_client")?;
            if count > 0 {
                non_null(urls, "urls")?;
            }
            let mut list = Vec::new(); // grown per URL checked: `count` is not trusted for an allocation
            for i in 0..count {
                let u = *urls.add(i);
                non_null(u, "a URL in urls")?;
                let url = if url_lens.is_null() {
                    std::ffi::CStr::from_ptr(u).to_str().map_err(|_| {
                        ferrolock::Error::new(ErrorKind::InvalidUrl, "a URL is not valid UTF-8")
                    })?
                } else {
                    utf8(u, *url_lens.add(i), "url", ErrorKind::InvalidUrl)?
                };
                list.push(url.to_owned());
            }
            let opts = to_options(options.as_ref())?;
            let client = blocking::Client::connect_redlock(list, opts)?;
            write(out_client, CLIENTS.insert(client));
            Ok(())
        })
    }
}

/// Whether `client` locks by quorum over several masters (made by
/// ferrolock_client_new_redlock()).
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_client_is_redlock(
    client: *const ferrolock_client,
    out_is_redlock: *mut bool,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_is_redlock, "out_is_redlock")?;
            write(out_is_redlock, CLIENTS.get(client)?.is_redlock());
            Ok(())
        })
    }
}

/// Close a client and everything made from it (docs/GUARANTEES.md, "Closing a client"). Does
/// no I/O and never blocks; any thread may call it, also from a ::ferrolock_lost_callback, and
/// closing twice is fine.
///
/// - An acquire of its locks waiting in another thread returns ::FERROLOCK_RESULT_CLOSED at once
///   (undone, as after a cancellation); one with a request in flight returns it when the reply
///   comes (at most the response timeout), releasing a grant that reply brings.
/// - Every live hold becomes ::FERROLOCK_LOCK_STATE_LOST (its loss callbacks run) and is **not
///   released**: no renewal is sent after this returns and the lease runs out on the server.
///   Release first if others should get the lock at once.
/// - Every later call on the client, its locks and their guards (ferrolock_lock_new(),
///   ferrolock_client_inspect(), ferrolock_client_force_unlock(), ferrolock_lock_acquire(),
///   ferrolock_lock_try_acquire(), ferrolock_guard_release(), ferrolock_guard_extend()) returns
///   ::FERROLOCK_RESULT_CLOSED; ferrolock_guard_state() reports ::FERROLOCK_LOCK_STATE_LOST.
///
/// The handles stay valid: free them as usual (ferrolock_client_free() alone closes nothing).
///
/// @return ::FERROLOCK_RESULT_OK; ::FERROLOCK_RESULT_NULL_ARGUMENT for NULL,
///         ::FERROLOCK_RESULT_CLOSED for a freed handle.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_client_close(
    client: *const ferrolock_client,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            CLIENTS.get(client)?.close();
            Ok(())
        })
    }
}

/// Free a client handle. NULL, or a handle already freed, is a no-op. This closes nothing:
/// locks and guards made from it stay usable (they keep the connection alive) until they are
/// freed too; once they all are, renewals stop and leases run out. To stop everything at once
/// (a pending acquire in another thread, renewals of held locks), call ferrolock_client_close()
/// first.
#[unsafe(no_mangle)]
pub extern "C" fn ferrolock_client_free(client: *mut ferrolock_client) {
    catch((), || CLIENTS.remove(client))
}

/// The longest owner token a ferrolock_lock_info carries (ferrolock's own are 32 hex digits).
pub const FERROLOCK_OWNER_MAX: usize = 64;

/// What ferrolock_client_inspect() reports about one lock.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ferrolock_lock_info {
    /// Whether the lock is held; the other fields are zero when it is not.
    pub held: bool,
    /// The holder's owner token (not NUL-terminated), its first `owner_len` bytes (at most
    /// FERROLOCK_OWNER_MAX; `owner_len` is the full length when the token is longer).
    pub owner: [u8; FERROLOCK_OWNER_MAX],
    /// The owner token's length in bytes.
    pub owner_len: usize,
    /// The holder's reentrancy depth.
    pub count: u32,
    /// The hold's fencing token.
    pub fence: u64,
    /// Server-side time to expiry in ms; -1: the hold has no expiry.
    pub ttl_ms: i64,
}

/// Who holds the lock `name`, read from the server (no lock handle needed; read-only).
///
/// @param out_info receives the report (`held` false when the lock is free).
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_client_inspect(
    client: *const ferrolock_client,
    name: *const u8,
    name_len: usize,
    out_info: *mut ferrolock_lock_info,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            non_null(out_info, "out_info")?;
            let c = CLIENTS.get(client)?;
            let name = bytes(name, name_len, "name")?;
            let mut out = ferrolock_lock_info {
                held: false,
                owner: [0; FERROLOCK_OWNER_MAX],
                owner_len: 0,
                count: 0,
                fence: 0,
                ttl_ms: 0,
            };
            if let Some(info) = c.inspect(name)? {
                let n = info.owner.len().min(FERROLOCK_OWNER_MAX);
                out.owner[..n].copy_from_slice(&info.owner[..n]);
                out.held = true;
                out.owner_len = info.owner.len();
                out.count = info.count;
                out.fence = info.fence;
                out.ttl_ms = info.ttl.map_or(-1, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
            }
            write(out_info, out);
            Ok(())
        })
    }
}

/// Administrative release: delete whatever hold the lock `name` has and wake its waiters. The
/// former holder finds out at its next renewal (its state becomes LOST).
///
/// @param out_was_held NULL, or receives whether anything was held.
///
/// # Safety
/// Every pointer argument is NULL or valid as described in bindings-c/README.md, "API conventions".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ferrolock_client_force_unlock(
    client: *const ferrolock_client,
    name: *const u8,
    name_len: usize,
    out_was_held: *mut bool,
    out_error: *mut *mut ferrolock_error,
) -> ferrolock_result {
    // SAFETY: pointer contracts as documented.
    unsafe {
        call(out_error, || {
            let c = CLIENTS.get(client)?;
            let name = bytes(name, name_len, "name")?;
            let info = c.force_unlock(name)?;
            if !out_was_held.is_null() {
                write(out_was_held, info.is_some());
            }
            Ok(())
        })
    }
}
