//! `ferrolock`: run a command under a Redis distributed lock (like `flock`, `etcdctl lock`,
//! `consul lock`), show a lock's state, or remove a hold by force. See cli/README.md.

/// `eprintln!` that never panics: a closed stderr (EPIPE: `2>&1 | logger` after the reader died)
/// must not turn a documented exit code into a panic's 101, nor stop a lost lock's SIGTERM.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` that never panics (`ferrolock status … | head -1`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod admin;
mod duration;
mod exec;
mod fail;
mod server;
mod signals;
mod spinner;

/// Bytes for display: printable UTF-8 as it is, a backslash doubled, and every other byte (not
/// valid UTF-8, or part of a control character) as `\xNN`. Lock names and owners are binary-safe:
/// replacing bad bytes with U+FFFD would show two names alike, and a control character (a newline,
/// a terminal escape) would forge or garble the lines around it.
pub fn shown(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let hex = |out: &mut String, b: &u8| out.push_str(&format!("\\x{b:02x}"));
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    c.encode_utf8(&mut [0; 4]).as_bytes().iter().for_each(|b| hex(&mut out, b))
                }
                c => out.push(c),
            }
        }
        chunk.invalid().iter().for_each(|b| hex(&mut out, b));
    }
    out
}

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::fail::{Fail, code};
use crate::signals::Signals;

#[derive(Debug, Parser)]
#[command(name = "ferrolock", version, about = "Run commands under a Redis distributed lock")]
struct Cli {
    #[command(flatten)]
    redis: RedisArgs,

    /// rediss:// only: trust the CA certificates in this PEM file instead of the system store
    /// (the server's certificate and host name are always verified).
    #[arg(long, value_name = "FILE", global = true)]
    cacert: Option<std::path::PathBuf>,

    /// rediss:// only: client certificate (PEM) for mutual TLS; needs --key.
    #[arg(long, value_name = "FILE", global = true)]
    cert: Option<std::path::PathBuf>,

    /// rediss:// only: private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", global = true)]
    key: Option<std::path::PathBuf>,

    /// Every grant must be acknowledged by N replicas (WAIT), else it is undone and the command
    /// fails with NOT_REPLICATED (one server, Sentinel or Cluster; not with several --redis
    /// masters; see docs/GUARANTEES.md).
    #[arg(long, value_name = "N", global = true)]
    replica_acks: Option<u32>,

    /// With --replica-acks: the longest wait for the acknowledgements (1ms to 1s, below the
    /// response timeout). Default 100ms.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, global = true)]
    replica_acks_timeout: Option<Duration>,

    /// Key prefix, as the applications' clients set it (an empty string for none). Default:
    /// FERROLOCK_PREFIX if set, else "ferrolock:".
    #[arg(long, value_name = "PREFIX", global = true, allow_hyphen_values = true)]
    prefix: Option<String>,

    #[command(subcommand)]
    command: Command,
}

/// `--redis`, accepted before and after the subcommand: the two lists add up. (A `global` arg
/// would let the subcommand's values replace the others: `ferrolock --redis A --redis B exec
/// --redis C` locked on C alone, mutual exclusion with the Redlock users of A, B, C gone.)
#[derive(Debug, Args)]
pub struct RedisArgs {
    /// Redis server URL (redis://[user:password@]host[:port][/db], redis+unix:///path/to.sock,
    /// redis+sentinel://host:port[,host:port]/master-name[/db] through Sentinel,
    /// redis+cluster://host:port[,host:port] for Redis Cluster; rediss://, rediss+sentinel://
    /// and rediss+cluster:// for TLS). Repeat it to lock by Redlock
    /// over several independent masters (before and after the subcommand, they add up).
    /// Default: the space-separated URLs in FERROLOCK_REDIS, else redis://127.0.0.1:6379.
    #[arg(long = "redis", value_name = "URL")]
    redis: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Acquire NAME, run CMD with FERROLOCK_NAME and FERROLOCK_FENCE in its environment,
    /// release when it exits, and exit with its status.
    #[command(after_help = EXEC_NOTES)]
    Exec(ExecArgs),
    /// Show whether NAME is held, by whom, its reentrancy count, fence and remaining lease.
    Status(StatusArgs),
    /// Remove NAME's hold whoever owns it (administrative), and print what was removed.
    Unlock(UnlockArgs),
}

const EXEC_NOTES: &str = "\
Durations: 500ms, 30s, 5m, 1h, or sums like 1m30s.

Exit codes: CMD's own status (killed by signal N: ferrolock ends by N too, 128+N in a shell);
75 lock not obtained; 76 lock lost while CMD ran (CMD got SIGTERM, then SIGKILL after
--kill-grace) or found lost when it ended; 2 bad usage; 125 ferrolock failed (server, auth);
126 CMD cannot run; 127 CMD not found; signal N (128+N) if N came before CMD started.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM are passed on to CMD (and
SIGTSTP, SIGCONT without a terminal); the lock is released after it exits.";

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    redis: RedisArgs,
    /// Wait at most this long for the lock, then exit with the conflict code
    /// (default: wait without bound).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration::parse,
        allow_hyphen_values = true,
        conflicts_with = "no_wait"
    )]
    pub wait: Option<Duration>,
    /// Do not wait: if the lock is held, exit with the conflict code at once.
    #[arg(long, short = 'n')]
    pub no_wait: bool,
    /// Lease kept alive by the watchdog while CMD runs (renewed every third of it); a crashed
    /// ferrolock frees the lock after at most this long. At least 100ms; default 30s.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_lease, allow_hyphen_values = true)]
    pub ttl: Option<Duration>,
    /// Fair mode: queue on the server; each release hands the lock to the oldest waiter
    /// (first come, first served). Every contender of the name should use it (not with
    /// several --redis masters, Redlock, nor with --replica-acks).
    #[arg(long)]
    pub fair: bool,
    /// Exit code when the lock is not obtained (--no-wait, or --wait elapsed).
    #[arg(long, short = 'E', value_name = "N", default_value_t = code::CONFLICT)]
    pub conflict_exit_code: u8,
    /// Exit code when the lock is lost while CMD runs (CMD is then terminated).
    #[arg(long, value_name = "N", default_value_t = code::LOST)]
    pub lost_exit_code: u8,
    /// After losing the lock, how long CMD has between SIGTERM and SIGKILL.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration::parse,
        allow_hyphen_values = true,
        default_value = "10s"
    )]
    pub kill_grace: Duration,
    /// No progress display while waiting, and no message when the lock is not obtained.
    #[arg(long, short)]
    pub quiet: bool,
    /// The lock name (the Redis key is ferrolock:{NAME}).
    pub name: OsString,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    redis: RedisArgs,
    /// Print one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
    /// The lock name.
    pub name: OsString,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    redis: RedisArgs,
    /// Required: confirms removing a hold that may belong to someone else. Its holder finds out
    /// at its next renewal (ferrolock exec then terminates its command).
    #[arg(long)]
    pub force: bool,
    /// The lock name.
    pub name: OsString,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        // (clap renders this one as the whole help, whose first line is the tagline.)
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let why = "a subcommand is required: exec, status or unlock (see ferrolock --help)";
            return Fail::usage(why.to_owned()).report();
        }
        Err(e) => {
            // `ferrolock exec NAME make deploy`: say what is missing, not only what is extra.
            let args: Vec<OsString> = std::env::args_os().collect();
            let no_separator = args.iter().any(|a| a == "exec") && !args.iter().any(|a| a == "--");
            let hint = (e.kind() == clap::error::ErrorKind::UnknownArgument && no_separator)
                .then_some("the command goes after `--` (ferrolock exec NAME -- CMD)");
            return Fail::usage(fail::clap_line(&e, hint)).report();
        }
    };
    // `exec` takes its signals from the start, before the runtime's threads exist (signals.rs).
    let signals = match &cli.command {
        Command::Exec(_) => match Signals::start() {
            Ok(s) => Some(s),
            Err(f) => return f.report(),
        },
        Command::Status(_) | Command::Unlock(_) => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return Fail::new(code::FAILURE, format!("cannot start the runtime: {e}")).report(),
    };
    let result = runtime.block_on(run(cli, signals));
    runtime.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(status) => ExitCode::from(status),
        Err(f) => f.report(),
    }
}

async fn run(cli: Cli, signals: Option<Signals>) -> Result<u8, Fail> {
    if let Command::Unlock(a) = &cli.command
        && !a.force
    {
        return Err(Fail::usage(
            "unlock removes a hold that may belong to someone else: add --force to confirm".to_owned(),
        ));
    }
    let replica_acks = match (cli.replica_acks, cli.replica_acks_timeout) {
        (Some(n), t) => Some(ferrolock::ReplicaAcks::new(n, t.unwrap_or(Duration::from_millis(100)))),
        (None, Some(_)) => return Err(Fail::usage("--replica-acks-timeout needs --replica-acks".to_owned())),
        (None, None) => None,
    };
    let mut urls = cli.redis.redis;
    urls.extend(
        match &cli.command {
            Command::Exec(a) => &a.redis.redis,
            Command::Status(a) => &a.redis.redis,
            Command::Unlock(a) => &a.redis.redis,
        }
        .iter()
        .cloned(),
    );
    let servers = server::Servers {
        urls: server::urls(urls)?,
        tls: server::tls(cli.cacert, cli.cert, cli.key)?,
        replica_acks,
        prefix: server::prefix(cli.prefix)?,
    };
    match (cli.command, signals) {
        (Command::Exec(a), Some(signals)) => exec::run(&servers, a, signals).await,
        (Command::Exec(_), None) => Err(Fail::new(code::FAILURE, "exec without its signals".to_owned())),
        // One connection attempt's time, as `exec -n`: an operator's look should not take the
        // core's four attempts against a server that does not answer.
        (Command::Status(a), _) => admin::status(&connect_once(&servers).await?, a).await,
        (Command::Unlock(a), _) => admin::unlock(&connect_once(&servers).await?, a).await,
    }
}

async fn connect_once(servers: &server::Servers) -> Result<ferrolock::Client, Fail> {
    server::connect_within(servers, Some(server::options(servers).connect_timeout)).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn shown_keeps_utf8_and_escapes_other_bytes() {
        assert_eq!(super::shown("é-1".as_bytes()), "é-1");
        assert_eq!(super::shown(b"a\xff\xfe"), "a\\xff\\xfe");
        assert_ne!(super::shown(b"a\xff"), super::shown(b"a\xfe"));
    }
}
