//! The signals ferrolock takes while it holds or waits for a lock, to forward them to the
//! command (or to stop waiting) and release the lock afterwards.
//!
//! They are blocked in every thread from the start (before the runtime's threads exist, which
//! inherit the mask) and one thread takes them with sigwaitinfo(2). Unlike a handler, that
//! tells how each one was sent, and leaves no handler for the command to inherit:
//! - A Ctrl-C or Ctrl-\ typed at the terminal comes from the kernel (`SI_KERNEL`) and goes to
//!   the terminal's whole foreground process group; a `kill` comes from a process (`SI_USER`)
//!   and goes where it is sent. So a typed one is not sent again to a command that shares
//!   ferrolock's group (it already has it), and every other one is passed on.
//! - The command is forked with them still blocked and gets ferrolock's original mask back just
//!   before exec, with their default actions: one that reaches it in between stays pending and
//!   acts on it then, instead of running an inherited handler that would swallow it.

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::fail::{Fail, code};

/// Forwarded to the command: interrupt, terminate, hang-up, quit, the user signals and the alarm
/// (every signal whose default action ends a process and that a `kill` commonly sends: left to
/// that default, it would end ferrolock alone, and the lock would stay held for a lease while the
/// command, orphaned, ran on).
const FORWARDED: [libc::c_int; 7] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM];

/// Also forwarded, without a controlling terminal only: stop and continue. Left to its default,
/// a SIGTSTP would stop ferrolock alone, the lease would run out, and another holder would run
/// beside the command. Taken, it stops the command's group while ferrolock keeps the lease (as
/// a stopped `flock` job keeps its lock). At a terminal, job control stops ferrolock and the
/// command together (they share a process group there), and the shell waits for ferrolock to
/// stop: these keep their defaults.
const JOB_CONTROL: [libc::c_int; 2] = [libc::SIGTSTP, libc::SIGCONT];

/// One signal received by ferrolock.
#[derive(Clone, Copy, Debug)]
pub struct Caught {
    pub sig: libc::c_int,
    /// Sent by the kernel rather than by a process: for SIGINT and SIGQUIT, typed at the
    /// terminal (Ctrl-C, Ctrl-\), which sends it to its whole foreground process group.
    pub by_kernel: bool,
}

impl Caught {
    fn is_job_control(self) -> bool {
        JOB_CONTROL.contains(&self.sig)
    }
}

pub struct Signals {
    rx: UnboundedReceiver<Caught>,
    /// The mask ferrolock was started with, which the command gets back.
    started_with: libc::sigset_t,
}

impl Signals {
    /// Block the forwarded signals in the calling thread, and start the thread that takes them.
    /// Call it before any other thread exists: threads created later inherit the mask, and a
    /// thread created earlier would still run the default action (end ferrolock at once).
    ///
    /// Signals ferrolock was started with ignored are left alone (a shell starts background
    /// jobs with SIGINT and SIGQUIT ignored): they stay ignored, and the command inherits that.
    pub fn start() -> Result<Signals, Fail> {
        // SAFETY: sigemptyset/sigaddset fill a local set; pthread_sigmask changes this thread's
        // mask and writes the previous one into a local.
        let (set, started_with) = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            let jobs: &[libc::c_int] = if has_controlling_terminal() { &[] } else { &JOB_CONTROL };
            for &sig in FORWARDED.iter().chain(jobs) {
                if !is_ignored(sig) {
                    libc::sigaddset(&mut set, sig);
                }
            }
            let mut old: libc::sigset_t = std::mem::zeroed();
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            if rc != 0 {
                let e = std::io::Error::from_raw_os_error(rc);
                return Err(Fail::new(code::FAILURE, format!("cannot block signals: {e}")));
            }
            (set, old)
        };
        let (tx, rx) = unbounded_channel();
        let taker =
            std::thread::Builder::new().name("ferrolock-signals".to_owned()).spawn(move || take(&set, &tx));
        if let Err(e) = taker {
            // SAFETY: restores this thread's mask to what it was on entry.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &started_with, std::ptr::null_mut()) };
            return Err(Fail::new(code::FAILURE, format!("cannot start the signal thread: {e}")));
        }
        Ok(Signals { rx, started_with })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Caught {
        match self.rx.recv().await {
            Some(c) => c,
            None => std::future::pending().await, // the taking thread ended: no more signals
        }
    }

    /// The next signal received that ends a wait: not a stop or continue (there is no command to
    /// pass those to yet; ferrolock goes on waiting).
    pub async fn recv_ending(&mut self) -> Caught {
        loop {
            let c = self.recv().await;
            if !c.is_job_control() {
                return c;
            }
        }
    }

    /// A signal received, not yet taken, and ending a wait, if any (see [`Self::recv_ending`]).
    pub fn try_recv_ending(&mut self) -> Option<Caught> {
        std::iter::from_fn(|| self.rx.try_recv().ok()).find(|c| !c.is_job_control())
    }

    /// What the command's process must do between fork and exec (see [`ForChild::restore`]).
    pub fn for_child(&self) -> ForChild {
        ForChild { mask: self.started_with }
    }
}

/// The taking thread: every forwarded signal, with how it was sent, until nobody listens.
fn take(set: &libc::sigset_t, tx: &UnboundedSender<Caught>) {
    loop {
        // SAFETY: sigwaitinfo reads `set` and fills a local siginfo_t.
        let (sig, info) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            (libc::sigwaitinfo(set, &mut info), info)
        };
        if sig < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue; // a handled signal (SIGCHLD) ran on this thread
            }
            return;
        }
        if tx.send(Caught { sig, by_kernel: info.si_code == libc::SI_KERNEL }).is_err() {
            return;
        }
    }
}

/// Copied into the command's process before exec.
#[derive(Clone, Copy)]
pub struct ForChild {
    mask: libc::sigset_t,
}

impl ForChild {
    /// In the forked child, just before exec: unblock the forwarded signals again (ferrolock's
    /// original mask). Their actions there are the defaults (ferrolock installs no handler), so
    /// one that arrived since the fork acts now, as it would on the command.
    /// Only async-signal-safe calls (sigprocmask).
    pub fn restore(self) -> std::io::Result<()> {
        // SAFETY: sets the mask of the (single-threaded) child from a copied set.
        if unsafe { libc::sigprocmask(libc::SIG_SETMASK, &self.mask, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

fn is_ignored(sig: libc::c_int) -> bool {
    // SAFETY: sigaction with a null new action only reads the current disposition into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Whether ferrolock has a controlling terminal (an interactive session, in the foreground or
/// as a job in the background, whatever its stdin, stdout and stderr are): `/dev/tty` opens.
pub fn has_controlling_terminal() -> bool {
    // SAFETY: open(2) of a constant path (not made the controlling terminal: O_NOCTTY), and
    // close(2) of the descriptor it returned.
    unsafe {
        let fd = libc::open(c"/dev/tty".as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        libc::close(fd);
    }
    true
}

/// Where the command's signals go: its process, or its whole process group.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pid: libc::pid_t,
    group: bool,
}

impl Target {
    /// `pid` is our own child, not yet reaped while signals are sent (so neither it nor its
    /// group id can have been reused). `group`: the child leads its own process group.
    pub fn new(pid: Option<u32>, group: bool) -> Target {
        let pid = pid.and_then(|p| libc::pid_t::try_from(p).ok()).unwrap_or(0);
        Target { pid, group }
    }

    /// Pass a signal ferrolock received on to the command, unless the terminal already sent
    /// it there: a Ctrl-C or Ctrl-\ reaches the terminal's whole foreground process group,
    /// which includes a command that shares ferrolock's group, and a second SIGINT would cut
    /// short the command's own clean-up. A command in its own group (started without a
    /// controlling terminal) did not get it, and a `kill` reached ferrolock only.
    pub fn forward(self, c: Caught) {
        let typed = c.by_kernel && (c.sig == libc::SIGINT || c.sig == libc::SIGQUIT);
        if typed && !self.group {
            return;
        }
        self.send(c.sig);
        if !c.is_job_control() {
            // A command stopped (by a forwarded SIGTSTP, or a `kill -STOP`) acts on it only once
            // continued: ferrolock would wait for it, holding the lock, until someone did.
            self.send(libc::SIGCONT);
        }
    }

    /// Whether the command leads a process group of its own that still has a member (after the
    /// command itself was reaped: its children). Such a group keeps its id, which the kernel
    /// does not hand to a new process while the group exists.
    pub fn group_alive(self) -> bool {
        // SAFETY: kill(2) with signal 0 only checks that the group exists.
        self.group && self.pid > 0 && unsafe { libc::kill(-self.pid, 0) } == 0
    }

    pub fn send(self, sig: libc::c_int) {
        if self.pid <= 0 {
            return;
        }
        let id = if self.group { -self.pid } else { self.pid };
        // SAFETY: plain kill(2).
        unsafe {
            libc::kill(id, sig);
        }
    }
}

/// The conventional name of a signal, for messages.
pub fn name(sig: libc::c_int) -> String {
    match sig {
        libc::SIGINT => "SIGINT".to_owned(),
        libc::SIGTERM => "SIGTERM".to_owned(),
        libc::SIGHUP => "SIGHUP".to_owned(),
        libc::SIGQUIT => "SIGQUIT".to_owned(),
        libc::SIGKILL => "SIGKILL".to_owned(),
        libc::SIGUSR1 => "SIGUSR1".to_owned(),
        libc::SIGUSR2 => "SIGUSR2".to_owned(),
        libc::SIGALRM => "SIGALRM".to_owned(),
        n => format!("signal {n}"),
    }
}
