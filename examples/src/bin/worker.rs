//! The Rust demo worker (protocol: examples/README.md).

use std::time::Duration;

use ferrolock::{ClientOptions, LockOptions, blocking};
use ferrolock_examples::{ResourceConn, monotonic_ns};

fn arg(args: &[String], name: &str) -> String {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| {
        eprintln!("worker: missing {name}");
        std::process::exit(2)
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (redis, resource, name) = (arg(&args, "--redis"), arg(&args, "--resource"), arg(&args, "--name"));
    let iterations: u64 = arg(&args, "--iterations").parse().unwrap_or(0);
    let id = arg(&args, "--id");
    if let Err(e) = run(&redis, &resource, &name, iterations, &id) {
        eprintln!("worker {id}: {e}");
        std::process::exit(1);
    }
}

fn run(
    redis: &str,
    resource: &str,
    name: &str,
    iterations: u64,
    id: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let client = blocking::Client::connect(redis, ClientOptions::default())?;
    let lock = client.lock(name, LockOptions::default())?;
    let mut res = ResourceConn::connect(resource)?;
    for _ in 0..iterations {
        let held = lock.acquire(Some(Duration::from_secs(60)))?;
        let acquired_ns = monotonic_ns();
        let ok = res.fenced_increment(held.fence())?;
        let released_ns = monotonic_ns();
        held.release()?;
        println!(
            "{{\"id\":\"{id}\",\"lang\":\"rust\",\"fence\":{},\"acquired_ns\":{acquired_ns},\"released_ns\":{released_ns},\"rejected\":{}}}",
            held.fence(),
            !ok
        );
    }
    Ok(())
}
