//! The timing rules every lock kind shares (DESIGN §4).
//!
//! Validity is measured from a monotonic stamp taken *before* the first request is sent:
//! `deadline = t_send + ttl − drift`, `drift = ttl × factor + min`. A grant whose deadline has
//! already passed is never returned as success.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::options::{ClientOptions, MAX_DURATION};

/// The drift allowance for a lease of `ttl`.
pub fn drift(opts: &ClientOptions, ttl: Duration) -> Duration {
    ttl.mul_f64(opts.drift_factor) + opts.drift_min
}

/// The local deadline of a lease of `ttl` whose request was sent at `t_send`.
pub fn deadline(opts: &ClientOptions, t_send: Instant, ttl: Duration) -> Instant {
    t_send + ttl.saturating_sub(drift(opts, ttl))
}

/// Fair mode: the longest lease a hand-over gives a queued waiter before that waiter confirms
/// it (an owner-checked extend to its own lease): what a stale queue entry (a waiter that died,
/// or whose leave never reached the server) costs the waiters behind it (docs/PROTOCOL.md).
pub(crate) const GRANT_OFFER: Duration = Duration::from_secs(2);

/// The lease a hand-over gives a queued waiter whose lease is `ttl`: `ttl` itself when it is no
/// longer than [`GRANT_OFFER`] (the grant is then taken without a confirmation when the waiter's
/// last try was recent), else the offer.
pub(crate) fn grant_offer(ttl: Duration) -> Duration {
    ttl.min(GRANT_OFFER)
}

/// A TTL must be a whole number of milliseconds the server accepts, and leave a validity of
/// at least 2 ms after the drift.
pub(crate) fn check_ttl(opts: &ClientOptions, what: &str, ttl: Duration) -> Result<()> {
    if ttl > MAX_DURATION {
        return Err(Error::invalid_duration(what, "longer than one year"));
    }
    let too_short =
        |t: Duration| t < Duration::from_millis(1) || t <= drift(opts, t) + Duration::from_millis(2);
    if too_short(ttl) {
        // Name the shortest whole-millisecond TTL accepted (with the default drift, 5 ms).
        let shortest = (1..=MAX_DURATION.as_millis() as u64)
            .map(Duration::from_millis)
            .find(|&t| !too_short(t))
            .map_or(String::new(), |t| format!("; the shortest accepted is {} ms", t.as_millis()));
        return Err(Error::invalid_duration(
            what,
            &format!("too short: the validity after the clock-drift allowance would be under 2 ms{shortest}"),
        ));
    }
    Ok(())
}

/// A wait bound (`None`: wait without bound).
pub(crate) fn check_wait(wait: Option<Duration>) -> Result<()> {
    match wait {
        Some(w) if w > MAX_DURATION => Err(Error::invalid_duration("wait", "longer than one year")),
        _ => Ok(()),
    }
}

/// Milliseconds for the server, rounded up so the lease is never shorter than asked.
pub(crate) fn millis(d: Duration) -> u64 {
    let ms = d.as_millis();
    let ms = if d.as_nanos().is_multiple_of(1_000_000) { ms } else { ms + 1 };
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_and_deadline() {
        let o = ClientOptions::default();
        assert_eq!(drift(&o, Duration::from_secs(1)), Duration::from_millis(12));
        let t = Instant::now();
        assert_eq!(deadline(&o, t, Duration::from_secs(1)), t + Duration::from_millis(988));
    }

    #[test]
    fn ttl_bounds() {
        let o = ClientOptions::default();
        // A TTL refused as too short names the shortest one accepted (0 said "at least 1 ms",
        // and 1 ms was then refused).
        for short in [Duration::ZERO, Duration::from_micros(500), Duration::from_millis(4)] {
            let e = check_ttl(&o, "ttl", short).unwrap_err();
            assert!(e.message().contains("the shortest accepted is 5 ms"), "{short:?}: {e}");
        }
        let slow =
            ClientOptions { drift_min: Duration::from_secs(60), drift_factor: 0.49, ..Default::default() };
        let e = check_ttl(&slow, "ttl", Duration::from_secs(1)).unwrap_err();
        assert!(e.message().contains("the shortest accepted is 117651 ms"), "{e}");
        assert!(check_ttl(&o, "ttl", Duration::from_millis(5)).is_ok());
        assert!(check_ttl(&o, "ttl", MAX_DURATION + Duration::from_secs(1)).is_err());
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_millis(7)), 7);
    }
}
