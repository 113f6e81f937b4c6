//! Durations on the command line: `500ms`, `30s`, `5m`, `1h`, and sums such as `1m30s`.
//!
//! A unit is always required: a bare `30` is refused rather than guessed (seconds? milliseconds?).

use std::time::Duration;

/// The longest duration accepted anywhere on the command line (the core's own cap).
const MAX: Duration = ferrolock::MAX_DURATION;

/// The shortest `--ttl`: the watchdog renews every third of the lease, and a renewal needs a
/// round trip and a scheduler turn; below this, a lease is lost at once more often than not
/// (5–10 ms always were). The library takes shorter leases (a fixed lease it does not renew).
pub const SHORTEST_LEASE: Duration = Duration::from_millis(100);

/// Parse `--ttl`: a duration of at least [`SHORTEST_LEASE`].
pub fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d < SHORTEST_LEASE {
        return Err(format!(
            "'{}' is too short a lease to renew (at least {})",
            s.trim(),
            human(SHORTEST_LEASE)
        ));
    }
    Ok(d)
}

/// Parse a duration; the error says what is wrong in one line (without repeating the flag).
pub fn parse(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty duration (examples: 500ms, 30s, 5m, 1h)".to_owned());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("'{text}' is not a duration (examples: 500ms, 30s, 5m, 1h)"));
        }
        let (num, after) = rest.split_at(digits);
        let unit_len = after.find(|c: char| c.is_ascii_digit()).unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let per = match unit {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            "" => return Err(format!("'{text}' has no unit (write e.g. {num}s or {num}ms)")),
            _ => return Err(format!("'{text}': unknown unit '{unit}' (use ms, s, m or h)")),
        };
        // Whole units up to a year of milliseconds fit; anything longer is refused below.
        let n: u64 = num.parse().map_err(|_| format!("'{text}' is too long (at most one year)"))?;
        total = u64::try_from(per.as_millis())
            .ok()
            .and_then(|per| per.checked_mul(n))
            .map(Duration::from_millis)
            .and_then(|d| total.checked_add(d))
            .filter(|d| *d <= MAX)
            .ok_or_else(|| format!("'{text}' is too long (at most one year)"))?;
        rest = next;
    }
    Ok(total)
}

/// A short human form for messages: `850ms`, `12.3s`, `4m05s`, `2h10m`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_units_and_sums() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1s500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse(" 2s "), Ok(Duration::from_secs(2)));
        // More than 2^32 of a unit, within a year (it was refused as "too long").
        assert_eq!(parse("5000000000ms"), Ok(Duration::from_millis(5_000_000_000)));
    }

    #[test]
    fn refuses_garbage_with_a_reason() {
        for (bad, why) in [
            ("", "empty"),
            ("30", "no unit"),
            ("5x", "unknown unit"),
            ("-1s", "not a duration"),
            ("1.5s", "unknown unit"),
            ("s", "not a duration"),
            ("ms5", "not a duration"),
            ("9999999h", "too long"),
            ("99999999999999999999s", "too long"),
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn human_forms() {
        assert_eq!(human(Duration::from_millis(850)), "850ms");
        assert_eq!(human(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(human(Duration::from_secs(245)), "4m05s");
        assert_eq!(human(Duration::from_secs(7800)), "2h10m");
    }

    #[test]
    fn the_shortest_lease_is_accepted_and_no_shorter() {
        assert_eq!(parse_lease("100ms"), Ok(SHORTEST_LEASE));
        assert!(parse_lease("99ms").is_err());
    }
}
