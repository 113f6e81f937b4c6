#![allow(dead_code)]
//! Shared helpers for the core's integration tests (real servers, never mocks).

pub mod cluster;

use std::time::Duration;

use ferrolock::{Client, ClientOptions};
pub use ferrolock_testkit::RedisServer;

pub async fn connect(server: &RedisServer) -> Client {
    connect_with(server, ClientOptions::default()).await
}

pub async fn connect_with(server: &RedisServer, opts: ClientOptions) -> Client {
    Client::connect(&server.url(), opts).await.expect("connect")
}

pub fn fast_opts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(200);
    o
}

pub fn evalsha_calls(server: &RedisServer) -> u64 {
    server.command_calls().get("evalsha").copied().unwrap_or(0)
}

/// Commands clients sent (commands run inside scripts are counted by Redis too; leave them out).
pub fn client_calls(server: &RedisServer) -> u64 {
    const CLIENT_SENT: &[&str] = &["evalsha", "eval", "script|load", "subscribe", "unsubscribe", "ping"];
    let stats = server.command_calls();
    CLIENT_SENT.iter().map(|k| stats.get(*k).copied().unwrap_or(0)).sum()
}
