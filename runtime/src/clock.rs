//! The coarse clock that ends a breaker's timing of a call on the success
//! path.
//!
//! A slow-call breaker must know how long each call took. Read precisely,
//! that is two clock reads per call, each costing as much as the rest of
//! the breaker's work (19 ns each on the benchmark machine; `benches/`).
//! Linux keeps a coarse monotonic clock, updated at each scheduler tick
//! (every 1 to 4 ms), that reads in about 4 ns from the vDSO. Every call of
//! an annotated function starts on tokio's clock, the one a test pauses and
//! advances. Its end is read on the coarse clock instead when that gives the
//! same answer:
//!
//! * **The breaker's threshold is at least [`RESOLUTIONS`] ticks.** The
//!   error of a coarse duration is under one tick, so under 1 % of the
//!   threshold; a call counts as slow when its coarse duration exceeds the
//!   threshold by more than a tick, so a coarse reading never makes slow a
//!   call that was not, and at most misses one within 1 % of the
//!   threshold. (The default threshold, 60 s, is 15,000 ticks of 4 ms.)
//! * **The body was ready at its first poll.** A body that has waited (an
//!   `.await` that returned `Pending`) ends on tokio's clock, so a call
//!   that sleeps on a paused clock, or advances it, is as slow as the clock
//!   says. A body ready at once took no time on a paused clock (paused time
//!   moves only while the runtime waits, and `advance` itself waits), and
//!   its coarse duration is its real one: a body that blocks its thread
//!   for longer than the threshold is slow, on any clock.
//!
//! Elsewhere (other systems, thresholds under 100 ticks, time-based
//! windows, which need the time of each outcome anyway) breakers read
//! tokio's clock at both ends.

use std::sync::OnceLock;
use std::time::Duration;

/// A threshold must span this many ticks of the coarse clock for a breaker
/// to time its calls with it (the coarse error is then under 1 %).
pub(crate) const RESOLUTIONS: u32 = 100;

/// A reading of the coarse monotonic clock: nanoseconds since boot (584
/// years fit), to its tick. Eight bytes, not a `Duration`'s sixteen: a
/// breaker's permit carries one through every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Coarse(u64);

impl Coarse {
    /// The nanoseconds from `earlier` to this reading (zero if it is later).
    #[inline]
    pub(crate) fn nanos_since(self, earlier: Coarse) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// The coarse clock's tick, if this system has such a clock.
pub(crate) fn resolution() -> Option<Duration> {
    static RESOLUTION: OnceLock<Option<Duration>> = OnceLock::new();
    *RESOLUTION.get_or_init(platform::resolution)
}

/// Reads the coarse clock. Only called once [`resolution`] said there is one.
#[inline]
pub(crate) fn now() -> Coarse {
    Coarse(platform::now())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod platform {
    use std::time::Duration;

    use rustix::time::{ClockId, Timespec, clock_getres, clock_gettime};

    fn duration(t: Timespec) -> Option<Duration> {
        let secs = u64::try_from(t.tv_sec).ok()?;
        let nanos = u32::try_from(t.tv_nsec).ok()?;
        (nanos < 1_000_000_000).then(|| Duration::new(secs, nanos))
    }

    fn nanos(t: Timespec) -> Option<u64> {
        let secs = u64::try_from(t.tv_sec).ok()?;
        let nanos = u64::try_from(t.tv_nsec).ok()?;
        secs.checked_mul(1_000_000_000)?.checked_add(nanos)
    }

    pub(super) fn resolution() -> Option<Duration> {
        // A tick of zero or over a second is no coarse clock worth using.
        duration(clock_getres(ClockId::MonotonicCoarse))
            .filter(|r| !r.is_zero() && *r <= Duration::from_secs(1))
    }

    #[inline]
    pub(super) fn now() -> u64 {
        nanos(clock_gettime(ClockId::MonotonicCoarse)).unwrap_or_default()
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod platform {
    use std::time::Duration;

    pub(super) fn resolution() -> Option<Duration> {
        None
    }

    // Never called: `resolution` says there is no coarse clock here.
    pub(super) fn now() -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_moves_forward_with_real_time() {
        let Some(tick) = resolution() else {
            return; // no coarse clock here: nothing uses it
        };
        let start = now();
        std::thread::sleep(tick * 3);
        let elapsed = Duration::from_nanos(now().nanos_since(start));
        assert!(
            elapsed >= tick,
            "{elapsed:?} after sleeping 3 ticks of {tick:?}"
        );
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
        assert_eq!(start.nanos_since(now()), 0, "never negative");
    }
}
