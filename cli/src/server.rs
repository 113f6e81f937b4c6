//! Which servers to use, and connecting to them (one server, or Redlock over several).

use std::path::PathBuf;
use std::time::Duration;

use ferrolock::{Client, ClientOptions, TlsOptions};

use crate::duration::human;
use crate::fail::{Fail, code};

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The URLs from `--redis`, else from `FERROLOCK_REDIS` (space-separated), else the default.
/// The variable is read here rather than by clap so that `--help` never shows its value
/// (it may hold a password).
pub fn urls(flags: Vec<String>) -> Result<Vec<String>, Fail> {
    if !flags.is_empty() {
        return Ok(flags);
    }
    match std::env::var("FERROLOCK_REDIS") {
        Ok(v) if !v.trim().is_empty() => Ok(v.split_whitespace().map(str::to_owned).collect()),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(vec![DEFAULT_URL.to_owned()]),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Fail::usage("FERROLOCK_REDIS is not valid UTF-8".to_owned()))
        }
    }
}

/// The key prefix from `--prefix`, else from `FERROLOCK_PREFIX`; `None`: the library's default.
/// One that is not UTF-8 is refused (ignored, it would lock another key than the applications).
pub fn prefix(flag: Option<String>) -> Result<Option<String>, Fail> {
    if flag.is_some() {
        return Ok(flag);
    }
    match std::env::var("FERROLOCK_PREFIX") {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Fail::usage("FERROLOCK_PREFIX is not valid UTF-8".to_owned()))
        }
    }
}

/// Where to connect: the URLs and the TLS files for `rediss://`.
#[derive(Debug)]
pub struct Servers {
    pub urls: Vec<String>,
    pub tls: TlsOptions,
    /// `--replica-acks` / `--replica-acks-timeout`.
    pub replica_acks: Option<ferrolock::ReplicaAcks>,
    /// `--prefix` / `FERROLOCK_PREFIX`; `None`: the library's default.
    pub prefix: Option<String>,
}

/// The TLS options from `--cacert`, `--cert` and `--key` (read now, so a missing file is a usage
/// error before any connection).
pub fn tls(cacert: Option<PathBuf>, cert: Option<PathBuf>, key: Option<PathBuf>) -> Result<TlsOptions, Fail> {
    let bad = |e: ferrolock::Error| Fail::usage(e.message().to_owned());
    let mut tls = TlsOptions::default();
    if let Some(ca) = cacert {
        tls = tls.with_root_ca_file(ca).map_err(bad)?;
    }
    match (cert, key) {
        (None, None) => {}
        (Some(cert), Some(key)) => tls = tls.with_client_cert_files(cert, key).map_err(bad)?,
        _ => return Err(Fail::usage("--cert and --key go together".to_owned())),
    }
    Ok(tls)
}

/// One URL: a single-server client. Several: a Redlock client over independent masters.
/// The client options the CLI connects with.
pub fn options(servers: &Servers) -> ClientOptions {
    let mut opts = ClientOptions::default();
    opts.tls = servers.tls.clone();
    opts.replica_acks = servers.replica_acks;
    if let Some(p) = &servers.prefix {
        opts.prefix.clone_from(p);
    }
    opts
}

/// [`connect`], given up (exit 125) after `bound` if one is given.
pub async fn connect_within(servers: &Servers, bound: Option<Duration>) -> Result<Client, Fail> {
    let Some(bound) = bound else { return connect(servers).await };
    tokio::time::timeout(bound, connect(servers)).await.unwrap_or_else(|_| {
        Err(Fail::new(code::FAILURE, format!("cannot connect: no answer within {}", human(bound))))
    })
}

pub async fn connect(servers: &Servers) -> Result<Client, Fail> {
    let opts = options(servers);
    let urls = &servers.urls;
    if urls.len().is_multiple_of(2) {
        // (The library's message names its option for the quorum, which the CLI does not have.)
        return Err(Fail::usage(format!(
            "{} servers is an even number: give an odd number of --redis for Redlock (its quorum is a \
             strict majority)",
            urls.len()
        )));
    }
    let client = if let [url] = urls.as_slice() {
        Client::connect(url, opts).await
    } else {
        Client::connect_redlock(urls, opts).await
    };
    client.map_err(|e| Fail::core("cannot connect", &e))
}
