//! Time as the lock-free cores count it: integer nanoseconds.

use std::time::Duration;

use tokio::time::Instant;

/// `d` in nanoseconds, saturating at `u64::MAX` (about 584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds from `origin` to `now` (zero if `now` is earlier).
pub(crate) fn nanos_since(origin: Instant, now: Instant) -> u64 {
    nanos(now.saturating_duration_since(origin))
}
