//! How long to wait before the next attempt.
//!
//! The four strategies and their formulas are those of Marc Brooker,
//! "Exponential Backoff And Jitter", AWS Architecture Blog (2015). Here `n`
//! counts retries from 0, so `base` is the ceiling of the first delay and
//! `cap` the largest (the article's simulator counts its first retry as
//! exponent 1, a first ceiling of `2 * base`; we keep `base_ms` the longest
//! first wait, as users read it):
//!
//! | strategy | delay before retry `n` |
//! |---|---|
//! | `full_jitter` (default) | `U(0, min(cap, base * 2^n))` |
//! | `equal_jitter` | `t/2 + U(0, t/2)` with `t = min(cap, base * 2^n)` |
//! | `decorrelated_jitter` | `min(cap, U(base, prev * 3))`, `prev` starting at `base` |
//! | `exponential` | `min(cap, base * 2^n)`, no jitter |
//!
//! In the article's simulation of many clients contending for one
//! resource, exponential backoff without jitter (clients retrying in
//! lock-step) helped the work only a little over no backoff at all and took
//! by far the longest; of the jittered strategies, full jitter did the
//! least work, finishing only slightly later than decorrelated jitter;
//! hence the default. The README's results section reruns that experiment
//! with this code (`cargo run --release -p resilient-examples --example
//! backoff_experiment`). The default
//! `base` of 100 ms and `cap` of 30 s keep the first retry quick and stop the
//! doubling before a delay outlives any sensible deadline.

use std::time::Duration;

use crate::rng;
use crate::time::nanos;

/// A backoff strategy: the delay before each retry.
///
/// ```
/// use std::time::Duration;
/// use resilient::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1));
/// let delays: Vec<_> = backoff.delays().take(5).collect();
/// assert_eq!(delays, [100, 200, 400, 800, 1000].map(Duration::from_millis));
///
/// // Jittered delays stay within the formula's bounds.
/// resilient::seed_jitter(7);
/// let full = Backoff::full_jitter(Duration::from_millis(100), Duration::from_secs(30));
/// for (n, d) in full.delays().take(8).enumerate() {
///     assert!(d <= Duration::from_millis(100) * 2u32.pow(n as u32));
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    strategy: Strategy,
    base: Duration,
    cap: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    FullJitter,
    EqualJitter,
    DecorrelatedJitter,
    Exponential,
}

/// The default first delay: 100 ms.
pub(crate) const DEFAULT_BASE: Duration = Duration::from_millis(100);
/// The default largest delay: 30 s.
pub(crate) const DEFAULT_CAP: Duration = Duration::from_secs(30);

impl Default for Backoff {
    fn default() -> Self {
        Backoff::full_jitter(DEFAULT_BASE, DEFAULT_CAP)
    }
}

impl Backoff {
    const fn new(strategy: Strategy, base: Duration, cap: Duration) -> Self {
        Backoff {
            strategy,
            base,
            cap,
        }
    }

    /// `U(0, min(cap, base * 2^n))`.
    pub const fn full_jitter(base: Duration, cap: Duration) -> Self {
        Self::new(Strategy::FullJitter, base, cap)
    }

    /// `t/2 + U(0, t/2)` with `t = min(cap, base * 2^n)`.
    pub const fn equal_jitter(base: Duration, cap: Duration) -> Self {
        Self::new(Strategy::EqualJitter, base, cap)
    }

    /// `min(cap, U(base, prev * 3))`, with `prev` the previous delay, starting at `base`.
    pub const fn decorrelated_jitter(base: Duration, cap: Duration) -> Self {
        Self::new(Strategy::DecorrelatedJitter, base, cap)
    }

    /// `min(cap, base * 2^n)`, without jitter.
    pub const fn exponential(base: Duration, cap: Duration) -> Self {
        Self::new(Strategy::Exponential, base, cap)
    }

    /// The first delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The largest delay.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The successive delays before retry 0, 1, 2, … (an endless iterator).
    /// Jittered strategies draw from the current thread's generator (see
    /// [`seed_jitter`](crate::seed_jitter)).
    pub fn delays(&self) -> Delays {
        Delays {
            backoff: *self,
            retry: 0,
            prev: self.base,
        }
    }

    /// `min(cap, base * 2^n)` in nanoseconds, without overflow.
    fn ceiling(&self, retry: u32) -> u64 {
        let cap = nanos(self.cap);
        let base = nanos(self.base);
        match 1u64.checked_shl(retry).and_then(|f| base.checked_mul(f)) {
            Some(t) => t.min(cap),
            None => cap,
        }
    }
}

/// The delays of a [`Backoff`], one per retry. See [`Backoff::delays`].
#[derive(Debug, Clone)]
pub struct Delays {
    backoff: Backoff,
    retry: u32,
    prev: Duration,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let b = &self.backoff;
        let nanos = match b.strategy {
            Strategy::FullJitter => rng::between(0, b.ceiling(self.retry)),
            Strategy::EqualJitter => {
                let t = b.ceiling(self.retry);
                t / 2 + rng::between(0, t - t / 2)
            }
            Strategy::DecorrelatedJitter => {
                let base = nanos(b.base);
                let high = nanos(self.prev).saturating_mul(3).max(base);
                rng::between(base, high).min(nanos(b.cap))
            }
            Strategy::Exponential => b.ceiling(self.retry),
        };
        let delay = Duration::from_nanos(nanos);
        self.retry = self.retry.saturating_add(1);
        self.prev = delay;
        Some(delay)
    }
}
