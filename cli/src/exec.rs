//! `ferrolock exec`: acquire, run the command, release, exit with the command's status.
//!
//! Timing, renewal and waiting are the core's: the watchdog renews the lease and reports a loss;
//! this file only reacts (terminate the command, forward signals, map exit codes).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use ferrolock::{ErrorKind, Guard, Lock, LockOptions};
use tokio::process::Command;
use tokio::time::Instant;

use crate::ExecArgs;
use crate::duration::human;
use crate::fail::{Fail, code};
use crate::server;
use crate::signals::{self, Signals};
use crate::spinner;

/// `signals` were taken since before the runtime started (see signals.rs).
pub async fn run(servers: &server::Servers, a: ExecArgs, mut signals: Signals) -> Result<u8, Fail> {
    let name = a.name.as_bytes().to_vec();
    let shown = crate::shown(&name);
    let opts = match a.ttl {
        Some(ttl) => LockOptions::renewing(ttl),
        None => LockOptions::default(), // the client's watchdog lease (30 s), renewed
    }
    .with_fair(a.fair);
    // A bad name or lease is a usage error (2) whether or not the server answers.
    opts.check(&name, &server::options(servers)).map_err(|e| Fail::core("cannot lock", &e))?;
    // The wait covers connecting too: the core tries a server that does not answer four times
    // (2 s each) before it gives up, which `-n` or a short `--wait` should not take. At least one
    // attempt's timeout, so that `--wait 0s` still connects to a slow server.
    let started = Instant::now();
    let attempt = server::options(servers).connect_timeout;
    let bound = if a.no_wait { Some(attempt) } else { a.wait.map(|w| w.max(attempt)) };
    let client = tokio::select! {
        c = server::connect_within(servers, bound) => c?,
        c = signals.recv_ending() => {
            return Err(Fail::signalled(c.sig, format!("{} while connecting", signals::name(c.sig))));
        }
    };
    let lock = client.lock(&name, opts).map_err(|e| Fail::core("cannot lock", &e))?;

    let guard = tokio::select! {
        g = acquire(&lock, &a, a.wait.map(|w| w.saturating_sub(started.elapsed())), &shown) => g?,
        c = signals.recv_ending() => {
            // The wait is abandoned; an acquire in flight is undone by the core in the
            // background: give that undo a moment before the runtime shuts down.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let why = format!("{} while waiting for lock {shown}", signals::name(c.sig));
            return Err(Fail::signalled(c.sig, why));
        }
        never = spinner::waiting(client.clone(), name.clone(), a.quiet) => match never {},
    };
    let (program, args) =
        a.command.split_first().ok_or_else(|| Fail::usage("no command given".to_owned()))?;
    let mut cmd = Command::new(program);
    cmd.args(args).env("FERROLOCK_NAME", &a.name).env("FERROLOCK_FENCE", guard.fence().to_string());
    // If ferrolock dies (kill -9, OOM), nothing renews the lease any more: the command gets
    // SIGTERM rather than running on unprotected once the lease runs out. The death signal
    // follows the forking thread; this runs inside `block_on` on the main thread, which lives
    // as long as the process.
    // Last, the forwarded signals are unblocked (see signals.rs): one that reached the command
    // since the fork acts on it now.
    // SAFETY: only async-signal-safe calls (getppid, prctl, kill, getpid, sigprocmask) between
    // fork and exec.
    let parent = unsafe { libc::getpid() };
    let for_child = signals.for_child();
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGTERM); // ferrolock died before prctl
            }
            for_child.restore()
        });
    }
    // Without a controlling terminal (cron, systemd, CI): the command leads its own process
    // group and every signal goes to the whole group, so a shell script's children stop with it
    // (a shell killed by SIGTERM does not pass it on). With one (an interactive session, also
    // with stdio redirected or as a background job): the command stays in ferrolock's group, so
    // that the terminal's job control treats them as one job (reads, Ctrl-C, Ctrl-Z, `fg`); a
    // group of its own would be a background group that the terminal stops (SIGTTIN) as soon as
    // it reads, and that `fg` never resumes. Signals then go to the command's process only.
    let own_group = !signals::has_controlling_terminal();
    if own_group {
        cmd.process_group(0);
    }
    // A signal since the lock was obtained reached ferrolock only (a typed Ctrl-C included: the
    // command did not exist yet): stop here, as while waiting, rather than start the command
    // and then either not pass the signal on or have it cut the command short at its start.
    // What is left is the time between this check and the fork.
    if let Some(c) = signals.try_recv_ending() {
        release(&guard, &shown).await;
        let why =
            format!("{} after lock {shown} was obtained, before the command started", signals::name(c.sig));
        return Err(Fail::signalled(c.sig, why));
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            release(&guard, &shown).await;
            let code =
                if e.kind() == std::io::ErrorKind::NotFound { code::NOT_FOUND } else { code::CANNOT_RUN };
            return Err(Fail::new(code, format!("cannot run {}: {e}", crate::shown(program.as_bytes()))));
        }
    };
    let target = signals::Target::new(child.id(), own_group);

    let (lost_tx, mut lost_rx) = tokio::sync::oneshot::channel::<ferrolock::Error>();
    guard.on_lost(move |e| {
        let _ = lost_tx.send(e);
    });
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            st = child.wait() => break st,
            c = signals.recv() => target.forward(c),
            r = &mut lost_rx, if !lost => {
                let why = r.map_or_else(|_| "the hold ended".to_owned(), |e| e.message().to_owned());
                lost = true;
                kill_at = Some(terminate(target, &shown, &why, a.kill_grace));
            }
            () = guard.lost(), if !lost => {
                // The reason comes with the loss callback, run on the core's blocking pool.
                let why = match tokio::time::timeout(Duration::from_millis(50), &mut lost_rx).await {
                    Ok(Ok(e)) => e.message().to_owned(),
                    _ => "its lease ran out before it was renewed".to_owned(),
                };
                lost = true;
                kill_at = Some(terminate(target, &shown, &why, a.kill_grace));
            }
            () = tokio::time::sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() => {
                target.send(libc::SIGKILL);
                kill_at = None;
                say_aside(format!("the command did not stop within {}: sent SIGKILL", human(a.kill_grace)));
            }
        }
    };
    let status = status.map_err(|e| Fail::new(code::FAILURE, format!("cannot wait for the command: {e}")))?;
    if let Some(at) = kill_at {
        // Lost, and the command ended within its grace: what is left of its process group (a
        // shell script's children that outlived their shell) gets the grace's SIGKILL too,
        // before ferrolock exits. (These are not our children: nothing to wait on but the group.)
        while target.group_alive() && Instant::now() < at {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if target.group_alive() {
            target.send(libc::SIGKILL);
            let grace = human(a.kill_grace);
            say!("ferrolock: the command's process group did not stop within {grace}: sent SIGKILL");
        }
    }
    if lost {
        // Cleans up whatever is left under our token; the core never touches another owner's hold.
        let _ = guard.release().await;
        return Err(Fail::new(
            a.lost_exit_code,
            format!("the command was stopped because lock {shown} was lost ({})", describe(status)),
        ));
    }
    match guard.release().await {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::Lost => {
            return Err(Fail::new(
                a.lost_exit_code,
                format!("lock {shown} was found lost when the command ended ({}): {e}", describe(status)),
            ));
        }
        Err(e) => say!("ferrolock: could not release lock {shown} (it expires with its lease): {e}"),
    }
    exit_code(status)
}

/// `wait`: what is left of `a.wait` after connecting.
async fn acquire(lock: &Lock, a: &ExecArgs, wait: Option<Duration>, shown: &str) -> Result<Guard, Fail> {
    let not_obtained =
        |why: String| Fail::new(a.conflict_exit_code, if a.quiet { String::new() } else { why });
    if a.no_wait {
        return match lock.try_acquire().await {
            Ok(Some(g)) => Ok(g),
            Ok(None) => Err(not_obtained(format!("lock {shown} is held by another owner (--no-wait)"))),
            Err(e) => Err(Fail::core(&format!("cannot acquire lock {shown}"), &e)),
        };
    }
    match lock.acquire(wait).await {
        Ok(g) => Ok(g),
        // A wait that ended on a failure (a server that did not answer, a grant not replicated)
        // has it as its cause, which its message quotes: the lock was not necessarily held.
        Err(e) if e.kind() == ErrorKind::AcquireTimeout && e.cause().is_some() => Err(not_obtained(format!(
            "lock {shown} was not obtained within {}: {}",
            human(a.wait.unwrap_or_default()),
            e.message()
        ))),
        // Redlock: masters that stopped answering during the wait end it with the core's
        // QUORUM_NOT_REACHED (the last round did not reach a quorum), what one server's wait
        // reports as ACQUIRE_TIMEOUT quoting the failure: not obtained either.
        Err(e) if e.kind() == ErrorKind::QuorumNotReached && a.wait.is_some() => Err(not_obtained(format!(
            "lock {shown} was not obtained within {}: {e}",
            human(a.wait.unwrap_or_default())
        ))),
        Err(e) if e.kind() == ErrorKind::AcquireTimeout => Err(not_obtained(format!(
            "lock {shown} is still held after waiting {}",
            human(a.wait.unwrap_or_default())
        ))),
        Err(e) => Err(Fail::core(&format!("cannot acquire lock {shown}"), &e)),
    }
}

/// SIGTERM the command, tell why on stderr, and return when to SIGKILL it. The signal goes
/// first: a stderr that blocks (a full pipe nobody reads, a background job at a `tostop`
/// terminal) must not keep the command running without the lock.
fn terminate(target: signals::Target, shown: &str, why: &str, grace: Duration) -> Instant {
    target.send(libc::SIGTERM);
    target.send(libc::SIGCONT); // a command stopped by a forwarded SIGTSTP acts on it only once continued
    say_aside(format!(
        "lost lock {shown} while the command ran ({why}): sent SIGTERM, SIGKILL in {}",
        human(grace)
    ));
    Instant::now() + grace
}

/// Report on stderr without waiting for it: a stderr that blocks holds a thread of the blocking
/// pool, not the loop that sends the SIGKILL when the grace ends.
fn say_aside(line: String) {
    drop(tokio::task::spawn_blocking(move || say!("ferrolock: {line}")));
}

async fn release(guard: &Guard, shown: &str) {
    if let Err(e) = guard.release().await {
        say!("ferrolock: could not release lock {shown} (it expires with its lease): {e}");
    }
}

/// The command's exit code; killed by signal N, ferrolock ends by N too ([`Fail::signalled`]).
fn exit_code(status: std::process::ExitStatus) -> Result<u8, Fail> {
    match (status.code(), status.signal()) {
        (Some(c), _) => Ok(u8::try_from(c & 0xff).unwrap_or(code::FAILURE)),
        (None, Some(sig)) => Err(Fail::signalled(sig, String::new())),
        (None, None) => Ok(code::FAILURE),
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("it exited with status {c}"),
        (None, Some(sig)) => format!("it was killed by {}", signals::name(sig)),
        _ => "it ended".to_owned(),
    }
}
