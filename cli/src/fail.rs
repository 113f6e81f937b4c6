//! Exit codes and the one-line error report.

use std::process::ExitCode;

/// Exit codes of ferrolock itself. The command's own status passes through unchanged, and a
/// command killed by signal N ends ferrolock by the same signal (a shell reads 128 + N).
pub mod code {
    /// The lock was not obtained (`--no-wait`, or `--wait` elapsed); like `EX_TEMPFAIL`.
    pub const CONFLICT: u8 = 75;
    /// The lock was lost while the command ran; the command was terminated.
    pub const LOST: u8 = 76;
    /// Bad command line (unknown flag, malformed duration, missing `--force`).
    pub const USAGE: u8 = 2;
    /// ferrolock itself failed (server unreachable, authentication, protocol): like `timeout(1)`.
    pub const FAILURE: u8 = 125;
    /// The command was found but could not be started.
    pub const CANNOT_RUN: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
}

/// A failure to report on stderr as one line, with its exit code. Messages never contain a
/// server URL (core errors are already redacted, and URLs are never echoed here).
#[derive(Debug)]
pub struct Fail {
    pub code: u8,
    pub message: String,
    /// End by this signal rather than exit with `code` (see [`Fail::signalled`]).
    pub signal: Option<libc::c_int>,
}

impl Fail {
    pub fn new(code: u8, message: String) -> Fail {
        Fail { code, message, signal: None }
    }

    /// Signal `sig` ended the command, or reached ferrolock before the command started: once the
    /// lock is released, ferrolock ends by the same signal, as `timeout(1)` does, so that its
    /// caller sees what it would have seen without ferrolock (a shell script stops at a Ctrl-C
    /// only if its child died of SIGINT; an exit with 130 says the child handled it). 128 + N
    /// when that cannot be done.
    pub fn signalled(sig: libc::c_int, message: String) -> Fail {
        let code = u8::try_from(128 + (sig & 0x7f)).unwrap_or(code::FAILURE);
        Fail { code, message, signal: Some(sig) }
    }

    pub fn usage(message: String) -> Fail {
        Fail::new(code::USAGE, message)
    }

    /// A core error, prefixed with what was being done.
    pub fn core(doing: &str, e: &ferrolock::Error) -> Fail {
        let code = match e.kind() {
            ferrolock::ErrorKind::InvalidName
            | ferrolock::ErrorKind::InvalidDuration
            | ferrolock::ErrorKind::InvalidUrl
            | ferrolock::ErrorKind::InvalidArgument
            | ferrolock::ErrorKind::InvalidConfig => code::USAGE,
            _ => code::FAILURE,
        };
        Fail::new(code, format!("{doing}: {e}"))
    }

    /// Print `ferrolock: <message>` (an empty message prints nothing) and give the exit code.
    pub fn report(self) -> ExitCode {
        if !self.message.is_empty() {
            let line = self.message.replace(['\n', '\r'], " ");
            say!("ferrolock: {line}");
        }
        if let Some(sig) = self.signal {
            die_by(sig);
        }
        ExitCode::from(self.code)
    }
}

/// End the process by `sig`'s default action (without a core dump of ferrolock's own); returns
/// only if that action does not end it.
fn die_by(sig: libc::c_int) {
    // SAFETY: plain libc calls on local, initialised values. Every other thread keeps the
    // forwarded signals blocked (signals.rs), and raise(3) sends to this thread.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_CORE, &mut lim) == 0 {
            lim.rlim_cur = 0;
            libc::setrlimit(libc::RLIMIT_CORE, &lim);
        }
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}

/// A clap error as one line: its first paragraph (the message and any indented items under it),
/// without clap's `error: ` prefix and usage footer.
pub fn clap_line(e: &clap::Error, hint: Option<&str>) -> String {
    let text = e.render().to_string();
    let para: Vec<&str> = text
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = para.join(" ");
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    if line.is_empty() {
        return "invalid command line (see ferrolock --help)".to_owned();
    }
    match hint {
        Some(hint) => format!("{line}: {hint} (see ferrolock --help)"),
        None => format!("{line} (see ferrolock --help)"),
    }
}
