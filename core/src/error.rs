//! One error vocabulary for every language: [`ErrorKind`] with stable numeric and string codes.
//!
//! Codes are grouped in ranges: 1xx argument, 2xx connection/timeout, 3xx lock state,
//! 4xx protocol/script, 5xx internal. A code, once published, never changes meaning.

use std::fmt;

/// What went wrong, as a stable code shared by every binding.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An argument is out of range or malformed (generic).
    InvalidArgument,
    /// A lock name is empty or longer than the configured cap.
    InvalidName,
    /// A duration (TTL, wait, margin) is zero, negative, not finite, too small for the drift, or absurd.
    InvalidDuration,
    /// A server URL cannot be parsed, uses an unsupported scheme, or asks for what the server refuses (its database number; a Sentinel that is none).
    InvalidUrl,
    /// A configuration value is inconsistent (quorum, prefix, timeouts).
    InvalidConfig,
    /// A handle was used after it was closed or freed.
    Closed,
    /// A required pointer was NULL (C API).
    NullArgument,
    /// The server cannot be reached or the connection dropped.
    Connection,
    /// The server did not answer in time; the command may or may not have run.
    Timeout,
    /// The server refused the credentials.
    Auth,
    /// TLS setup or verification failed.
    Tls,
    /// The caller does not hold the lock (never acquired, already released, or another owner).
    NotHeld,
    /// The lock was held but is lost: its lease ran out or another owner took it.
    Lost,
    /// The caller's wait elapsed before the lock could be acquired.
    AcquireTimeout,
    /// Redlock could not obtain a majority of the masters.
    QuorumNotReached,
    /// Re-entry refused: the reentrancy depth limit is reached.
    ReentrancyLimit,
    /// The operation was cancelled by the caller.
    Cancelled,
    /// Fewer replicas than `ClientOptions::replica_acks` asks for acknowledged a grant in time;
    /// the grant was undone.
    NotReplicated,
    /// The server sent a reply this library does not understand.
    Protocol,
    /// The server refused a script or command for good (EVAL disabled, script error, fence
    /// exhausted, the lock's key holding a value of another type: `WRONGTYPE`).
    Script,
    /// The server's ACL denied a command or key.
    Permission,
    /// A bug in ferrolock (a caught panic, a broken invariant).
    Internal,
}

impl ErrorKind {
    /// Every kind, in code order. Bindings walk this list to prove their mapping is total.
    pub const ALL: &'static [ErrorKind] = &[
        ErrorKind::InvalidArgument,
        ErrorKind::InvalidName,
        ErrorKind::InvalidDuration,
        ErrorKind::InvalidUrl,
        ErrorKind::InvalidConfig,
        ErrorKind::Closed,
        ErrorKind::NullArgument,
        ErrorKind::Connection,
        ErrorKind::Timeout,
        ErrorKind::Auth,
        ErrorKind::Tls,
        ErrorKind::NotHeld,
        ErrorKind::Lost,
        ErrorKind::AcquireTimeout,
        ErrorKind::QuorumNotReached,
        ErrorKind::ReentrancyLimit,
        ErrorKind::Cancelled,
        ErrorKind::NotReplicated,
        ErrorKind::Protocol,
        ErrorKind::Script,
        ErrorKind::Permission,
        ErrorKind::Internal,
    ];

    /// The stable numeric code.
    pub const fn code(self) -> u32 {
        match self {
            ErrorKind::InvalidArgument => 100,
            ErrorKind::InvalidName => 101,
            ErrorKind::InvalidDuration => 102,
            ErrorKind::InvalidUrl => 103,
            ErrorKind::InvalidConfig => 104,
            ErrorKind::Closed => 105,
            ErrorKind::NullArgument => 106,
            ErrorKind::Connection => 200,
            ErrorKind::Timeout => 201,
            ErrorKind::Auth => 202,
            ErrorKind::Tls => 203,
            ErrorKind::NotHeld => 300,
            ErrorKind::Lost => 301,
            ErrorKind::AcquireTimeout => 302,
            ErrorKind::QuorumNotReached => 303,
            ErrorKind::ReentrancyLimit => 304,
            ErrorKind::Cancelled => 305,
            ErrorKind::NotReplicated => 306,
            ErrorKind::Protocol => 400,
            ErrorKind::Script => 401,
            ErrorKind::Permission => 402,
            ErrorKind::Internal => 500,
        }
    }

    /// The stable string code, e.g. `"NOT_HELD"`.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "INVALID_ARGUMENT",
            ErrorKind::InvalidName => "INVALID_NAME",
            ErrorKind::InvalidDuration => "INVALID_DURATION",
            ErrorKind::InvalidUrl => "INVALID_URL",
            ErrorKind::InvalidConfig => "INVALID_CONFIG",
            ErrorKind::Closed => "CLOSED",
            ErrorKind::NullArgument => "NULL_ARGUMENT",
            ErrorKind::Connection => "CONNECTION",
            ErrorKind::Timeout => "TIMEOUT",
            ErrorKind::Auth => "AUTH",
            ErrorKind::Tls => "TLS",
            ErrorKind::NotHeld => "NOT_HELD",
            ErrorKind::Lost => "LOST",
            ErrorKind::AcquireTimeout => "ACQUIRE_TIMEOUT",
            ErrorKind::QuorumNotReached => "QUORUM_NOT_REACHED",
            ErrorKind::ReentrancyLimit => "REENTRANCY_LIMIT",
            ErrorKind::Cancelled => "CANCELLED",
            ErrorKind::NotReplicated => "NOT_REPLICATED",
            ErrorKind::Protocol => "PROTOCOL",
            ErrorKind::Script => "SCRIPT",
            ErrorKind::Permission => "PERMISSION",
            ErrorKind::Internal => "INTERNAL",
        }
    }

    /// The kind with this numeric code.
    pub fn from_code(code: u32) -> Option<ErrorKind> {
        Self::ALL.iter().copied().find(|k| k.code() == code)
    }

    /// The kind with this string code.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        Self::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// Whether retrying the same call later may succeed (connection trouble, timeouts, a Redlock
    /// quorum that could not be reached this time, replicas that did not acknowledge in time).
    pub const fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorKind::Connection
                | ErrorKind::Timeout
                | ErrorKind::QuorumNotReached
                | ErrorKind::NotReplicated
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A ferrolock error: a stable [`ErrorKind`] plus a human-readable message, and for a wait that
/// ended while its attempts failed, that failure as its [`cause`](Error::cause).
///
/// Messages never contain passwords: every message built from a server or driver error passes
/// through the client's redaction first.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    cause: Option<Box<Error>>,
}

impl Error {
    /// A new error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), cause: None }
    }

    /// `self`, caused by `cause`.
    pub(crate) fn caused_by(mut self, cause: Error) -> Self {
        self.cause = Some(Box::new(cause));
        self
    }

    /// The failure behind this error, if there is one: for an [`ErrorKind::AcquireTimeout`] or
    /// [`ErrorKind::Cancelled`] acquire whose latest attempt failed (a server that could not be
    /// reached, a grant not replicated), that attempt's error; `None` when the wait ended
    /// because the lock was held by another owner. The message quotes it too. Also
    /// [`std::error::Error::source`].
    pub fn cause(&self) -> Option<&Error> {
        self.cause.as_deref()
    }

    /// The stable kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The stable numeric code (shortcut for `kind().code()`).
    pub fn code(&self) -> u32 {
        self.kind.code()
    }

    /// The message, without the code prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the server may not have answered in time (the outcome is unknown).
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// Whether the lock was lost.
    pub fn is_lost(&self) -> bool {
        self.kind == ErrorKind::Lost
    }

    pub(crate) fn invalid_duration(what: &str, why: &str) -> Self {
        Error::new(ErrorKind::InvalidDuration, format!("{what}: {why}"))
    }

    /// Classify a driver error. `redact` removes secrets from the text.
    pub(crate) fn from_redis(e: &redis::RedisError, redact: &dyn Fn(String) -> String) -> Self {
        use redis::ErrorKind as R;
        let kind = if matches!(e.code(), Some("WRONGPASS") | Some("NOAUTH")) {
            ErrorKind::Auth
        } else if e.code() == Some("NOPERM") || e.to_string().contains("no permissions to run") {
            // The driver reports a SELECT refused while connecting (a database number in the
            // URL) without its NOPERM code, only the server's text.
            ErrorKind::Permission
        } else if let Some(command) = crate::scripts::forbidden_script_command(&e.to_string()) {
            // Redis 7.0 reports a command an ACL forbids inside a script as a plain ERR naming
            // only the script line: name the command ourselves.
            return Error::new(
                ErrorKind::Permission,
                format!(
                    "this Redis user may not run {command}, which the lock scripts need (see the ACL \
                     rule set in docs/SECURITY.md): {}",
                    redact(e.to_string())
                ),
            );
        } else if is_tls_failure(e) {
            ErrorKind::Tls
        } else if e.is_timeout() {
            ErrorKind::Timeout
        } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            ErrorKind::Connection
        } else {
            match e.kind() {
                R::AuthenticationFailed => ErrorKind::Auth,
                // A server's error reply; `Extension` is one whose code the driver does not know
                // (WRONGTYPE, BUSY, OOM, NOREPLICAS, ...).
                R::Server(_) | R::Extension => match e.code() {
                    Some("NOPERM") => ErrorKind::Permission,
                    Some("WRONGPASS") | Some("NOAUTH") => ErrorKind::Auth,
                    // States a server leaves by itself, so a wait tries again: READONLY, a master
                    // demoted by a failover (Sentinel asks again, a cluster refreshes its slot
                    // map); CLUSTERDOWN, a cluster between states; MOVED and ASK that outlasted
                    // the driver's redirections, a slot on the move; BUSY, another client's
                    // script running long; OOM, memory full until keys expire or are evicted;
                    // NOREPLICAS, too few replicas for `min-replicas-to-write` until they return.
                    Some("LOADING") | Some("BUSY") | Some("TRYAGAIN") | Some("MASTERDOWN")
                    | Some("READONLY") | Some("CLUSTERDOWN") | Some("MOVED") | Some("ASK") | Some("OOM")
                    | Some("NOREPLICAS") => ErrorKind::Connection,
                    // Anything else will not pass by waiting: WRONGTYPE (the lock's key holds
                    // a value that is not ours), a script error, an unknown command.
                    _ => ErrorKind::Script,
                },
                R::Parse | R::UnexpectedReturnType => ErrorKind::Protocol,
                R::InvalidClientConfig => ErrorKind::InvalidConfig,
                _ => ErrorKind::Connection,
            }
        };
        Error::new(kind, redact(e.to_string()))
    }
}

/// Whether rustls refused the handshake (certificate, host name, protocol) somewhere in the
/// error's chain of causes.
fn is_tls_failure(e: &redis::RedisError) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    fn is_rustls(c: &(dyn std::error::Error + 'static)) -> bool {
        // redis keeps causes as `Arc<dyn Error>`, and `io::Error::source` skips the error it
        // wraps: look through both by hand.
        let c = match c.downcast_ref::<Shared>() {
            Some(shared) => &**shared as &(dyn std::error::Error + 'static),
            None => c,
        };
        c.downcast_ref::<rustls::Error>().is_some()
            || c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if is_rustls(c) {
            return true;
        }
        cause = c.source();
    }
    false
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("code", &self.kind.code())
            .field("message", &self.message)
            .field("cause", &self.cause)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_round_trip() {
        let mut codes: Vec<u32> = ErrorKind::ALL.iter().map(|k| k.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ErrorKind::ALL.len());
        for &k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_code(k.code()), Some(k));
            assert_eq!(ErrorKind::from_name(k.name()), Some(k));
            assert!((100..600).contains(&k.code()));
        }
    }

    /// A server's refusal that waiting can cure is transient (an acquire with a wait retries);
    /// one that it cannot is not.
    #[test]
    fn refusals_that_pass_are_transient() {
        let kind = |reply: &[u8]| {
            let v = redis::parse_redis_value(reply).unwrap();
            Error::from_redis(&v.extract_error().unwrap_err(), &|s| s).kind()
        };
        for reply in [
            &b"-MOVED 3999 127.0.0.1:6381\r\n"[..],
            b"-ASK 3999 127.0.0.1:6381\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"-CLUSTERDOWN The cluster is down\r\n",
            b"-READONLY You can't write against a read only replica.\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-BUSY Redis is busy running a script.\r\n",
            b"-OOM command not allowed when used memory > 'maxmemory'.\r\n",
            b"-NOREPLICAS Not enough good replicas to write.\r\n",
        ] {
            assert!(kind(reply).is_transient(), "{}", String::from_utf8_lossy(reply));
        }
        assert_eq!(kind(b"-ERR Error running script\r\n"), ErrorKind::Script);
        // A code the driver does not know is still the server's refusal, not a broken connection.
        assert_eq!(
            kind(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ErrorKind::Script
        );
        assert_eq!(kind(b"-NOPERM this user has no permissions\r\n"), ErrorKind::Permission);
    }
}
