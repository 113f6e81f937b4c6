//! Exit codes and the one-line error report.

use std::process::ExitCode;

/// Exit codes of ferrolock itself. The command's own status passes through unchanged, and a
/// command killed by signal N gives 128 + N, as in shells.
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
}

impl Fail {
    pub fn new(code: u8, message: String) -> Fail {
        Fail { code, message }
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
        ExitCode::from(self.code)
    }
}

/// A clap error as one line: its first paragraph (the message and any indented items under it),
/// without clap's `error: ` prefix and usage footer.
pub fn clap_line(e: &clap::Error) -> String {
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
    format!("{line} (see ferrolock --help)")
}
