//! Set-up shared by the Redis Cluster tests (tests/cluster.rs, cluster_sharded.rs,
//! cluster_replica_ack.rs) on a testkit [`RedisCluster`].

use std::time::Duration;

use ferrolock::ClientOptions;
use ferrolock_testkit::{RedisCluster, RedisServer};

/// The options of the cluster tests: a 1 s response timeout, room for a MOVED/ASK round trip.
pub fn opts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(1000);
    o
}

/// The hold key of lock `name`; its hash tag `{name}` picks the slot.
pub fn key(name: &str) -> String {
    format!("ferrolock:{{{name}}}")
}

/// How many times `server` ran `command` (a lower-case name, as `INFO commandstats` has it).
pub fn calls(server: &RedisServer, command: &str) -> u64 {
    server.command_calls().get(command).copied().unwrap_or(0)
}

/// A migration of one slot from its master `source` to another master `target`, step by step
/// (`CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE`, `CLUSTER SETSLOT … NODE`), so that a test
/// can act between the steps.
#[derive(Debug)]
pub struct SlotMove<'a> {
    pub source: &'a RedisServer,
    pub target: &'a RedisServer,
    /// The slot number, as the commands take it.
    pub slot: String,
    source_id: String,
    target_id: String,
}

impl<'a> SlotMove<'a> {
    /// The move of `key`'s slot from `source`, its master now, to another master of `cluster`.
    /// Only looks the nodes up: nothing moves before [`Self::begin`].
    pub fn new(cluster: &'a RedisCluster, source: &'a RedisServer, key: &str) -> SlotMove<'a> {
        let target = cluster
            .nodes
            .iter()
            .find(|n| {
                n.port() != source.port() && n.info_field("replication", "role").as_deref() == Some("master")
            })
            .expect("another master");
        let slot = source.cmd::<i64>(&["CLUSTER", "KEYSLOT", key]).to_string();
        let (source_id, target_id): (String, String) =
            (source.cmd(&["CLUSTER", "MYID"]), target.cmd(&["CLUSTER", "MYID"]));
        SlotMove { source, target, slot, source_id, target_id }
    }

    /// The target imports the slot, then the source migrates it (redirecting by ASK the keys it
    /// no longer has).
    pub fn begin(&self) {
        let _: String = self.target.cmd(&["CLUSTER", "SETSLOT", &self.slot, "IMPORTING", &self.source_id]);
        let _: String = self.source.cmd(&["CLUSTER", "SETSLOT", &self.slot, "MIGRATING", &self.target_id]);
    }

    /// The keys of the slot still on the source (at most 100).
    pub fn keys(&self) -> Vec<String> {
        self.source.cmd(&["CLUSTER", "GETKEYSINSLOT", &self.slot, "100"])
    }

    /// `MIGRATE` `keys` from the source to the target.
    pub fn migrate(&self, keys: &[String]) {
        let port = self.target.port().to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys.iter().map(String::as_str));
        let _: String = self.source.cmd(&migrate);
    }

    /// The slot belongs to the target, told to the target first, then to the source (which
    /// answers MOVED from then on).
    pub fn finish(&self) {
        for n in [self.target, self.source] {
            let _: String = n.cmd(&["CLUSTER", "SETSLOT", &self.slot, "NODE", &self.target_id]);
        }
    }
}
