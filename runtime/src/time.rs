//! Time as the lock-free cores count it: integer nanoseconds since one
//! origin shared by every breaker, budget and throttle.
//!
//! Converting an `Instant` to nanoseconds (a subtraction, a normalisation
//! and a 128-bit multiplication) costs more than the atomics it feeds, and
//! one call converts the same instant for its breaker, its budget and its
//! throttle: [`ticks`] keeps the last conversion of each thread, so each
//! clock read is converted once.

use std::cell::Cell;
use std::sync::OnceLock;
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

/// The origin of [`ticks`]: a year before the first use, on the real clock.
/// Taken from the real clock, never from tokio's paused one (which a test
/// may have advanced by years), and a year back, so a paused runtime
/// started before the first use still counts forward from it. What the
/// cores compute never depends on how far from the origin they are.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        let real = std::time::Instant::now();
        Instant::from_std(
            real.checked_sub(Duration::from_secs(365 * 86_400))
                .unwrap_or(real),
        )
    })
}

/// Nanoseconds from the shared origin to `now`.
#[inline]
pub(crate) fn ticks(now: Instant) -> u64 {
    thread_local! {
        static LAST: Cell<Option<(Instant, u64)>> = const { Cell::new(None) };
    }
    LAST.with(|last| match last.get() {
        Some((at, ticks)) if at == now => ticks,
        _ => {
            let ticks = nanos_since(origin(), now);
            last.set(Some((now, ticks)));
            ticks
        }
    })
}
