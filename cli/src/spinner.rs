//! The progress line shown on stderr while `exec` waits for a held lock: who holds it, how
//! long its lease has left, how long we have waited. Only on a terminal, never with --quiet, and
//! only while ferrolock is in the terminal's foreground: a background job's line would be drawn
//! over the user's prompt, and at a `stty tostop` terminal the write would stop ferrolock
//! (SIGTTOU), holding or about to hold the lock, with nobody renewing it.
//! It only displays: waiting itself is the core's (release notifications, lease bounds).

use std::convert::Infallible;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use ferrolock::{Client, LockInfo};

use crate::duration::human;

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// No line at all for waits shorter than this (an uncontended acquire never flashes).
const QUIET_START: Duration = Duration::from_millis(300);
const TICK: Duration = Duration::from_millis(100);
const REFRESH: Duration = Duration::from_secs(1);

/// Runs until dropped (it never completes); the line is cleared when it is dropped.
pub async fn waiting(client: Client, name: Vec<u8>, quiet: bool) -> Infallible {
    if quiet || !std::io::stderr().is_terminal() {
        return std::future::pending().await;
    }
    let start = Instant::now();
    tokio::time::sleep(QUIET_START).await;
    let shown = crate::shown(&name);
    let mut clear = ClearOnDrop(false);
    let mut holder: Option<(LockInfo, Instant)> = None;
    let mut fetched: Option<Instant> = None;
    let mut tick = 0usize;
    loop {
        let frame = FRAMES[tick % FRAMES.len()];
        tick = tick.wrapping_add(1);
        if fetched.is_none_or(|t| t.elapsed() >= REFRESH) {
            // Display only: an error just leaves the last known holder on the line.
            if let Ok(info) = client.inspect(&name).await {
                holder = info.map(|i| (i, Instant::now()));
            }
            fetched = Some(Instant::now());
        }
        let who = match &holder {
            Some((i, at)) => {
                let owner = crate::shown(&i.owner);
                let owner: String = owner.chars().take(8).collect();
                let lease = match i.ttl {
                    Some(t) => format!("lease ends in {}", human(t.saturating_sub(at.elapsed()))),
                    None => "no expiry".to_owned(),
                };
                format!("held by owner {owner} (fence {}, count {}, {lease})", i.fence, i.count)
            }
            None => "being released".to_owned(),
        };
        if in_foreground() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K{frame} waiting {} for lock {shown}: {who}", human(start.elapsed()));
            let _ = err.flush();
            clear.0 = true;
        }
        tokio::time::sleep(TICK).await;
    }
}

/// Whether ferrolock's process group is the foreground group of the terminal on stderr.
fn in_foreground() -> bool {
    // SAFETY: plain calls on a file descriptor and the calling process.
    unsafe { libc::tcgetpgrp(2) == libc::getpgrp() }
}

/// Clears the line once drawn (`true`), if still in the foreground.
struct ClearOnDrop(bool);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        if self.0 && in_foreground() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}
