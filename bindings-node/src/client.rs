//! `Client`: one connection to a Redis server, shared by the locks made from it.

use std::sync::Mutex;

use ferrolock::{Error, ErrorKind};
use napi::Env;
use napi::bindgen_prelude::{Buffer, Either, PromiseRaw, Utf16String};
use napi_derive::napi;

use crate::convert::{self, ClientOptions, LockOptions};
use crate::driver;
use crate::lock::Lock;
use crate::reply::Reply;

/// A connection to one Redis server (`redis://[user:password@]host[:port][/db]`, `rediss://`
/// for TLS). Cheap to share: all its locks share its connections (docs/CONNECTIONS.md).
#[napi]
pub struct Client {
    inner: Mutex<Option<ferrolock::Client>>,
    /// Made by `Redlock.connect` (still answered after `close`).
    redlock: bool,
}

/// Who holds a lock, as read by `client.inspect` or removed by `client.forceUnlock`.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct LockInfo {
    /// The holder's owner token (as text).
    pub owner: String,
    /// The holder's reentrancy depth.
    pub count: u32,
    /// The hold's fencing token (a safe integer: fences stay below 2^53).
    pub fence: f64,
    /// Server-side milliseconds to expiry (absent: no expiry, or not reported).
    pub ttl: Option<f64>,
}

impl From<ferrolock::LockInfo> for LockInfo {
    fn from(i: ferrolock::LockInfo) -> Self {
        LockInfo {
            owner: String::from_utf8_lossy(&i.owner).into_owned(),
            count: i.count,
            fence: i.fence as f64,
            ttl: i.ttl.map(convert::to_millis),
        }
    }
}

/// Redlock: one `Client` over N independent masters. Every operation of its locks runs on a
/// quorum of them (docs/REDLOCK.md); the surface is the single-server one.
#[napi]
#[derive(Debug)]
pub struct Redlock {}

#[napi]
impl Redlock {
    /// Connect to N masters (all URLs are checked before any I/O; each may carry its own
    /// credentials). Rejects with `QUORUM_NOT_REACHED` if fewer than a quorum can be reached now;
    /// `INVALID_CONFIG` for an even N without `redlockQuorum`, or a master listed twice.
    #[napi(writable = true, configurable = true, ts_return_type = "Promise<Client>")]
    pub fn connect<'env>(
        env: &'env Env,
        urls: Vec<String>,
        options: Option<ClientOptions>,
    ) -> napi::Result<PromiseRaw<'env, Reply<Client>>> {
        let opts = options.unwrap_or_default().to_core();
        driver::promise(env, async move {
            match opts {
                Ok(o) => Reply(ferrolock::Client::connect_redlock(&urls, o).await.map(Client::wrap)),
                Err(e) => Reply::err(e),
            }
        })
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The core's Debug shows the server address only, never the password.
        f.debug_struct("Client").field("inner", &self.inner).finish()
    }
}

pub(crate) fn closed() -> Error {
    Error::new(ErrorKind::Closed, "the client was closed")
}

impl Client {
    fn wrap(c: ferrolock::Client) -> Self {
        Client { redlock: c.is_redlock(), inner: Mutex::new(Some(c)) }
    }

    fn get(&self) -> ferrolock::Result<ferrolock::Client> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone().ok_or_else(closed)
    }
}

#[napi]
impl Client {
    /// Connect to a Redis server: `redis://[user:password@]host[:port][/db]`, `rediss://` for TLS,
    /// `redis+sentinel://host:port[,host:port…]/master-name[/db]` (the master found through
    /// Sentinel, failovers followed) or `redis+cluster://host:port[,host:port…]` (Redis Cluster
    /// seed nodes). Rejects with `INVALID_URL`, `CONNECTION`, `AUTH`, `TIMEOUT`…
    /// The URL (and its password) never appears in an error.
    #[napi(writable = true, configurable = true, ts_return_type = "Promise<Client>")]
    pub fn connect<'env>(
        env: &'env Env,
        url: String,
        options: Option<ClientOptions>,
    ) -> napi::Result<PromiseRaw<'env, Reply<Client>>> {
        let opts = options.unwrap_or_default().to_core();
        driver::promise(env, async move {
            match opts {
                Ok(o) => Reply(ferrolock::Client::connect(&url, o).await.map(Client::wrap)),
                Err(e) => Reply::err(e),
            }
        })
    }

    /// Whether this client locks by quorum over several masters (`Redlock.connect`), also after
    /// `close()`.
    #[napi(getter)]
    pub fn is_redlock(&self) -> bool {
        self.redlock
    }

    /// A lock handle on `name` (a string or a Buffer) with its own owner token. Acquiring
    /// again through the same handle re-enters; another handle contends. No I/O.
    #[napi(ts_return_type = "Lock")]
    pub fn lock(&self, name: Either<Utf16String, Buffer>, options: Option<LockOptions>) -> Reply<Lock> {
        Reply((|| {
            let name = convert::name(name)?;
            let opts = options.unwrap_or_default().to_core()?;
            Ok(Lock::new(self.get()?.lock(name, opts)?))
        })())
    }

    /// Who holds `name`, if anyone.
    #[napi(ts_return_type = "Promise<LockInfo | null>")]
    pub fn inspect<'env>(
        &self,
        env: &'env Env,
        name: Either<Utf16String, Buffer>,
    ) -> napi::Result<PromiseRaw<'env, Reply<Option<LockInfo>>>> {
        let args = convert::name(name).and_then(|n| Ok((self.get()?, n)));
        driver::promise(env, async move {
            let r = async {
                let (client, name) = args?;
                Ok(client.inspect(name).await?.map(LockInfo::from))
            };
            Reply(r.await)
        })
    }

    /// Administrative release: delete whatever hold `name` has and wake its waiters. The former
    /// holder finds out at its next renewal (its `signal` aborts).
    #[napi(ts_return_type = "Promise<LockInfo | null>")]
    pub fn force_unlock<'env>(
        &self,
        env: &'env Env,
        name: Either<Utf16String, Buffer>,
    ) -> napi::Result<PromiseRaw<'env, Reply<Option<LockInfo>>>> {
        let args = convert::name(name).and_then(|n| Ok((self.get()?, n)));
        driver::promise(env, async move {
            let r = async {
                let (client, name) = args?;
                Ok(client.force_unlock(name).await?.map(LockInfo::from))
            };
            Reply(r.await)
        })
    }

    /// Close the client and everything made from it (no I/O; never blocks; idempotent): a
    /// pending `acquire` of its locks rejects with `CLOSED`, live holds become `lost` (their
    /// `signal` aborts, `onLost` runs) and are left to expire with no further renewal, and every
    /// later call on the client, its locks and holds fails with `CLOSED`. A collected client
    /// closes nothing (its locks keep working while referenced).
    #[napi]
    pub fn close(&self) {
        if let Some(c) = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take() {
            c.close();
        }
    }
}
