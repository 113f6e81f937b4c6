//! The state of one grant ("hold"), shared by its guards and the watchdog (DESIGN §6).
//!
//! HELD → IN_DOUBT (a renewal failed or timed out) → LOST (the server said "not owner", or the
//! local deadline passed). RELEASED ends a hold normally. LOST and RELEASED are final.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::error::{Error, ErrorKind};

/// Where a hold stands.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockState {
    /// Held, with a lease confirmed before the local deadline.
    Held,
    /// A renewal failed or timed out; still within the local deadline.
    InDoubt,
    /// The lease ran out or the server reports another owner. Final.
    Lost,
    /// Released by its owner. Final.
    Released,
}

impl LockState {
    /// A stable lower-case name (`"held"`, `"in_doubt"`, `"lost"`, `"released"`).
    pub const fn name(self) -> &'static str {
        match self {
            LockState::Held => "held",
            LockState::InDoubt => "in_doubt",
            LockState::Lost => "lost",
            LockState::Released => "released",
        }
    }

    fn is_final(self) -> bool {
        matches!(self, LockState::Lost | LockState::Released)
    }
}

/// Called once when a hold is lost, with an error of kind [`ErrorKind::Lost`] saying why.
/// Runs on a blocking-pool thread of the client's runtime; a panic in it is contained.
pub type LostCallback = Box<dyn FnOnce(Error) + Send + 'static>;

struct St {
    count: u32,
    deadline: Instant,
    ttl: Duration,
    /// Bumped by every extend and re-entry (which set the lease on the server to a new length):
    /// a renewal sent before one of them cannot tell whether the server ran it before or after
    /// it, so its confirmation is not applied (see [`Hold::renewed`]).
    lease_gen: u64,
    guards: usize,
    watchdog: Option<u64>,
    /// Loss callbacks, each with the guard level that registered it (its owner key).
    callbacks: Vec<(usize, LostCallback)>,
    /// Why the hold was lost (set once, with the state).
    lost_why: Option<String>,
}

pub(crate) struct Hold {
    pub fence: u64,
    pub renew: bool,
    /// An extend or re-entry of this hold is on its way: the watchdog starts no renewal of it
    /// meanwhile (see [`crate::watchdog::Watchdog::lease_change`]).
    pub(crate) changing: std::sync::atomic::AtomicBool,
    st: Mutex<St>,
    tx: watch::Sender<LockState>,
    runtime: Handle,
}

impl Hold {
    pub fn new(
        fence: u64,
        count: u32,
        deadline: Instant,
        ttl: Duration,
        renew: bool,
        runtime: Handle,
    ) -> Hold {
        Hold {
            fence,
            renew,
            changing: std::sync::atomic::AtomicBool::new(false),
            st: Mutex::new(St {
                count,
                deadline,
                ttl,
                lease_gen: 0,
                guards: 0,
                watchdog: None,
                callbacks: Vec::new(),
                lost_why: None,
            }),
            tx: watch::Sender::new(LockState::Held),
            runtime,
        }
    }

    fn st(&self) -> std::sync::MutexGuard<'_, St> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, noticing an expired local deadline even before the watchdog does.
    pub fn state(&self) -> LockState {
        let s = *self.tx.borrow();
        if !s.is_final() && Instant::now() >= self.deadline() {
            self.mark_lost("the lease ran out before it was renewed or released");
            return *self.tx.borrow();
        }
        s
    }

    pub fn is_final(&self) -> bool {
        self.state().is_final()
    }

    pub fn subscribe(&self) -> watch::Receiver<LockState> {
        self.tx.subscribe()
    }

    /// The levels its owner still counts on: the count, less levels whose guard was dropped
    /// without a release (each live guard is one level). Releases aim at this, so a level
    /// given up by dropping its guard is released with the last live one instead of keeping
    /// the lock held (and renewed) forever.
    pub fn live_levels(&self) -> u32 {
        let st = self.st();
        st.count.min(u32::try_from(st.guards).unwrap_or(u32::MAX))
    }

    pub fn set_count(&self, count: u32) {
        self.st().count = count;
    }

    pub fn deadline(&self) -> Instant {
        self.st().deadline
    }

    pub fn ttl(&self) -> Duration {
        self.st().ttl
    }

    /// The lease length renewals use, and its generation for [`Hold::renewed`].
    pub fn lease(&self) -> (Duration, u64) {
        let st = self.st();
        (st.ttl, st.lease_gen)
    }

    pub fn remaining(&self) -> Duration {
        if self.state().is_final() {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// A renewal sent with the lease of generation `lease_gen` confirmed the lease until
    /// `deadline`. Ignored when an extend or re-entry set a new lease since it was sent: the
    /// server may have run the renewal first, so only the later lease is known to hold.
    /// Returns whether it counted.
    pub fn renewed(&self, deadline: Instant, lease_gen: u64) -> bool {
        if self.tx.borrow().is_final() {
            return false;
        }
        {
            let mut st = self.st();
            if st.lease_gen != lease_gen {
                return false;
            }
            st.deadline = st.deadline.max(deadline);
        }
        self.tx.send_if_modified(|s| std::mem::replace(s, LockState::Held) != LockState::Held);
        true
    }

    /// An extend or re-entry set the lease on the server to `ttl`, confirmed until `deadline`:
    /// the deadline is exactly that, also when it is sooner than before (a shorter lease), and
    /// renewals use `ttl` from now on.
    pub fn leased(&self, deadline: Instant, ttl: Duration) {
        if self.tx.borrow().is_final() {
            return;
        }
        {
            let mut st = self.st();
            st.deadline = deadline;
            st.ttl = ttl;
            st.lease_gen += 1;
        }
        self.tx.send_if_modified(|s| std::mem::replace(s, LockState::Held) != LockState::Held);
    }

    /// An extend or re-entry setting a lease that ends at `deadline` is about to go out (or got
    /// no answer): the server may run it whatever becomes of the call, so a shorter lease than
    /// the one held is the local bound from now (and for renewals); a longer one changes
    /// nothing until confirmed ([`Self::leased`]). Renewals already sent no longer count (they
    /// may have run first). The state is left as it is.
    pub fn lease_unknown(&self, deadline: Instant, ttl: Duration) {
        if self.tx.borrow().is_final() {
            return;
        }
        let mut st = self.st();
        if deadline < st.deadline {
            st.deadline = deadline;
            st.ttl = st.ttl.min(ttl);
            st.lease_gen += 1;
        }
    }

    pub fn in_doubt(&self) {
        self.tx.send_if_modified(|s| {
            let change = *s == LockState::Held;
            if change {
                *s = LockState::InDoubt;
            }
            change
        });
    }

    /// Final: lost. Fires the loss callbacks once. Returns false if the hold was already final.
    pub fn mark_lost(&self, why: &str) -> bool {
        let changed = self.tx.send_if_modified(|s| {
            let change = !s.is_final();
            if change {
                *s = LockState::Lost;
            }
            change
        });
        if changed {
            tracing::warn!(fence = self.fence, "ferrolock: lock lost: {why}");
            let callbacks = {
                let mut st = self.st();
                st.lost_why = Some(why.to_owned());
                std::mem::take(&mut st.callbacks)
            };
            for (_, cb) in callbacks {
                let err = Error::new(ErrorKind::Lost, why.to_owned());
                self.runtime.spawn_blocking(move || cb(err));
            }
        }
        changed
    }

    /// Why the hold was lost, once it is.
    pub fn lost_reason(&self) -> Option<String> {
        self.st().lost_why.clone()
    }

    pub fn mark_released(&self) {
        self.tx.send_if_modified(|s| {
            let change = !s.is_final();
            if change {
                *s = LockState::Released;
            }
            change
        });
        self.st().callbacks.clear();
    }

    /// Register a loss callback for the guard level `owner`; called at once (on the blocking
    /// pool) if already lost.
    pub fn on_lost(&self, owner: usize, cb: LostCallback) {
        let _ = self.state(); // marks a passed deadline lost first
        // The state is read under `st`: `mark_lost` sets it before it takes the callbacks under
        // `st`, so a callback pushed here while the state reads live is among those it takes
        // (read before the lock, a loss in between left the callback in a final hold, never run).
        let mut st = self.st();
        let state = *self.tx.borrow();
        match state {
            LockState::Lost => {
                let why = st.lost_why.clone().unwrap_or_else(|| "the lock was already lost".to_owned());
                drop(st);
                let err = Error::new(ErrorKind::Lost, why);
                self.runtime.spawn_blocking(move || cb(err));
            }
            LockState::Released => {}
            _ => st.callbacks.push((owner, cb)),
        }
    }

    /// The guard level `owner` was released: its loss callbacks will never run (they are
    /// dropped now, not kept until the whole hold ends: a long-held lock re-entered in a loop
    /// would pile them up).
    pub fn forget_lost(&self, owner: usize) {
        let gone: Vec<(usize, LostCallback)> = {
            let mut st = self.st();
            let (gone, keep) = std::mem::take(&mut st.callbacks).into_iter().partition(|(o, _)| *o == owner);
            st.callbacks = keep;
            gone
        };
        drop(gone); // outside the lock: a binding's callback may run code when dropped
    }

    pub fn add_guard(&self) -> usize {
        let mut st = self.st();
        st.guards += 1;
        st.guards
    }

    /// One fewer live guard; returns how many remain.
    pub fn drop_guard(&self) -> usize {
        let mut st = self.st();
        st.guards = st.guards.saturating_sub(1);
        st.guards
    }

    pub fn take_watchdog(&self) -> Option<u64> {
        self.st().watchdog.take()
    }

    pub fn set_watchdog(&self, id: u64) {
        self.st().watchdog = Some(id);
    }

    pub fn watchdog_id(&self) -> Option<u64> {
        self.st().watchdog
    }

    pub fn has_watchdog(&self) -> bool {
        self.st().watchdog.is_some()
    }
}
