//! # ferrolock
//!
//! Redis distributed locks with the timing, scripts and failure handling done once, for every
//! language: fencing tokens, reentrancy, watchdog renewal with lost-lock signals, and waiting by
//! release notification instead of polling. The wire format is `docs/PROTOCOL.md`.
//!
//! ```no_run
//! # async fn demo() -> ferrolock::Result<()> {
//! use std::time::Duration;
//! use ferrolock::{Client, ClientOptions, LockOptions};
//!
//! let client = Client::connect("redis://127.0.0.1:6379", ClientOptions::default()).await?;
//! let lock = client.lock("orders:42", LockOptions::default())?; // watchdog-renewed lease
//! let held = lock.acquire(Some(Duration::from_secs(5))).await?;
//! // Pass held.fence() to the resource you write; it must reject lower tokens.
//! println!("fence {}", held.fence());
//! held.release().await?;
//! # Ok(()) }
//! ```
//!
//! A [`Lock`] handle carries one owner token: acquiring again through the same handle (or a
//! clone) re-enters and returns the same fence; another handle contends. Dropping a [`Guard`]
//! never releases in Redis; it stops renewal and lets the lease run out.
//!
//! Redlock — one lock over N independent masters, granted by a quorum — is the same API with
//! another constructor, [`Client::connect_redlock`]; its assumptions are in `docs/REDLOCK.md`:
//!
//! ```no_run
//! # async fn demo() -> ferrolock::Result<()> {
//! use ferrolock::{Client, ClientOptions, LockOptions};
//! let urls = ["redis://a:6379", "redis://b:6379", "redis://c:6379"];
//! let client = Client::connect_redlock(urls, ClientOptions::default()).await?;
//! let held = client.lock("orders:42", LockOptions::default())?.acquire(None).await?;
//! held.release().await?;
//! # Ok(()) }
//! ```
//!
//! Sync code uses [`blocking`], which has the same names for the lock operations.

pub mod blocking;
mod client;
#[cfg(feature = "cluster")]
mod cluster;
#[cfg(feature = "cluster")]
mod cluster_sub;
pub mod driver;
mod error;
mod hold;
mod hot;
mod keys;
mod lock;
mod notify;
mod options;
mod redlock;
mod replicas;
mod scripts;
mod sentinel;
pub mod timing;
mod token;
mod watchdog;

pub use client::{Client, LockInfo};
pub use error::{Error, ErrorKind, Result};
pub use hold::{LockState, LostCallback};
pub use lock::{Guard, Lock};
pub use options::{ClientOptions, LockOptions, MAX_DURATION, ReplicaAcks, TlsOptions};
pub use token::new_token;

/// Tests only (a control that leaves refused grants behind); never call it in an application.
#[doc(hidden)]
pub use replicas::keep_refused_grants_for_tests;

/// The wire-format version implemented (docs/PROTOCOL.md).
pub const PROTOCOL_VERSION: u32 = 2;
