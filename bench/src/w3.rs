//! W3: ferrolock's Redlock over 5 masters, with the last masters SIGSTOPped and resumed.
//! Same phases and output shape as `py/bench.py w3` and `node/bench.mjs w3`.

use std::time::{Duration, Instant};

use ferrolock::{Client, ClientOptions, LockOptions};
use serde_json::{Value, json};

use crate::{Args, BoxError, LIB_VERSION, ns, server_counters, settings};

const PHASES: [(&str, usize, Option<u64>); 5] = [
    ("healthy", 0, None),
    ("one_stopped_default", 1, None),
    ("one_stopped_t100", 1, Some(100)),
    ("two_stopped_t100", 2, Some(100)),
    ("after_resume", 0, None),
];

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: plain kill(2) on a pid the orchestrator handed us (a redis-server it started).
    unsafe {
        libc::kill(pid, sig);
    }
}

pub fn w3(a: &Args) -> Result<Value, BoxError> {
    let urls: Vec<String> = a.str("urls", "").split(',').map(str::to_owned).collect();
    let pids: Vec<i32> = a.str("pids", "").split(',').map(|p| p.parse()).collect::<Result<_, _>>()?;
    let n = a.num("n", 2000)?;
    let phase_secs = a.num("phase-secs", 8)?;
    let hang = Duration::from_secs(a.num("hang-s", 3)?);
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let default_opts = ClientOptions::default();
    let mut t100_opts = ClientOptions::default();
    t100_opts.redlock_node_timeout = Duration::from_millis(100);
    let rl = |o: &ClientOptions| {
        let mut v = settings(o);
        v["redlock_node_timeout_ms"] = json!(o.redlock_node_timeout.as_millis() as u64);
        v["redlock_retry_jitter_ms"] = json!(o.redlock_retry_jitter.as_millis() as u64);
        v["redlock_max_inflight"] = json!(o.redlock_max_inflight);
        v
    };
    let set = json!({"default": rl(&default_opts), "t100": rl(&t100_opts)});
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let default_c = Client::connect_redlock(&refs[..], default_opts).await?;
        let t100_c = Client::connect_redlock(&refs[..], t100_opts).await?;
        let metrics = tokio::runtime::Handle::current().metrics();
        let base_tasks = metrics.num_alive_tasks();
        let mut phases = serde_json::Map::new();
        let mut stopped: Vec<usize> = Vec::new();
        let mut baseline = std::collections::HashMap::new();
        for (name, n_stopped, timeout) in PHASES {
            while stopped.len() < n_stopped {
                let i = urls.len() - 1 - stopped.len();
                baseline.insert(i, server_counters(&urls[i])?);
                stopped.push(i);
                signal(pids[i], libc::SIGSTOP);
            }
            let mut late = None;
            if n_stopped == 0 && !stopped.is_empty() {
                for &i in &stopped {
                    signal(pids[i], libc::SIGCONT);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut m = serde_json::Map::new();
                for &i in &stopped {
                    m.insert(urls[i].clone(), json!(server_counters(&urls[i])?.saturating_sub(baseline[&i] + 1)));
                }
                late = Some(m);
                stopped.clear();
            }
            let client = if timeout.is_some() { &t100_c } else { &default_c };
            let lock = client.lock(format!("bench:w3:rust:{name}"), LockOptions::lease(Duration::from_secs(10)))?;
            let (mut acq, mut rel) = (Vec::new(), Vec::new());
            let (mut failed, mut hung) = (0u64, 0u64);
            let end = Instant::now() + Duration::from_secs(phase_secs);
            for _ in 0..n {
                if Instant::now() > end {
                    break;
                }
                let t0 = Instant::now();
                let r = tokio::time::timeout(hang, lock.try_acquire()).await;
                let Ok(r) = r else {
                    hung += 1;
                    break;
                };
                acq.push(ns(t0.elapsed()));
                let Ok(Some(g)) = r else {
                    failed += 1;
                    continue;
                };
                let t1 = Instant::now();
                let Ok(r) = tokio::time::timeout(hang, g.release()).await else {
                    hung += 1;
                    break;
                };
                rel.push(ns(t1.elapsed()));
                if r.is_err() {
                    failed += 1;
                }
            }
            let mut ph = json!({
                "n": acq.len(), "completed": rel.len(), "failed": failed, "hung": hung,
                "acq_ns": acq, "rel_ns": rel,
                "tasks_alive_after": metrics.num_alive_tasks().saturating_sub(base_tasks),
            });
            if let Some(m) = late {
                ph["late_cmds_on_resumed_nodes"] = Value::Object(m);
            }
            phases.insert(name.to_owned(), ph);
        }
        for &i in &stopped {
            signal(pids[i], libc::SIGCONT);
        }
        Ok(json!({
            "ok": true, "lib_version": LIB_VERSION, "api": "async", "settings": set,
            "runtime": "tokio current_thread",
            "params": {"n": n, "phase_secs": phase_secs, "hang_s": hang.as_secs(), "masters": urls.len(), "ttl_ms": 10000},
            "phases": phases,
        }))
    })
}
