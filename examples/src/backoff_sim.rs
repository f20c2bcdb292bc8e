//! The backoff experiment of Marc Brooker, "Exponential Backoff And Jitter"
//! (AWS Architecture Blog, 2015), rebuilt on the library's own [`Backoff`].
//!
//! `N` clients start together and each wants to update one row once, by
//! optimistic concurrency: read the row's version, then write conditionally
//! on that version. A write whose version is stale fails; the client backs
//! off and starts again from a fresh read. Every message crosses the network
//! with a one-way delay of |Normal(10 ms, 2 ms)|. We count the writes the
//! server sees (the *work*) and the time until the last client has succeeded.
//!
//! Every backoff delay comes from [`Backoff::delays`] with the article's base
//! (5 ms) and cap (2 s); the jitter generator is seeded per trial with
//! [`resilient::seed_jitter`] and the network by its own seeded generator,
//! so every run gives the same figures.
//!
//! **Numbering of retries.** The library's `delays()` yields the delay
//! before retry 0 first, with ceiling `base * 2^0 = base`: `base` is the
//! largest first delay, as its docs say. The article's simulator increments
//! its attempt counter *before* computing the delay, so its first retry uses
//! exponent 1 (ceiling `2 * base`). To follow the article, the exponential,
//! full- and equal-jitter clients here skip the first delay of the
//! library's iterator ([`blog_delays`]). Decorrelated jitter has no exponent
//! (each delay is drawn from `[base, 3 * previous]`), so it is used as is.
//! The library keeps its numbering: a user who writes `base_ms = 100`
//! expects the first retry within 100 ms, not 200 ms.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use resilient::{Backoff, Delays};

/// The article's first delay: 5 ms.
pub const BASE: Duration = Duration::from_millis(5);
/// The article's largest delay: 2 s.
pub const CAP: Duration = Duration::from_secs(2);
/// Mean one-way network delay: 10 ms.
const NET_MEAN_NS: f64 = 10_000_000.0;
/// Standard deviation of the one-way network delay: 2 ms.
const NET_SD_NS: f64 = 2_000_000.0;

/// A backoff strategy of the article.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Retry at once (after the network delay).
    None,
    /// `min(cap, base * 2^n)`, no jitter.
    Exponential,
    /// `U(0, min(cap, base * 2^n))`.
    FullJitter,
    /// `t/2 + U(0, t/2)`, `t = min(cap, base * 2^n)`.
    EqualJitter,
    /// `min(cap, U(base, 3 * previous))`.
    Decorrelated,
}

impl Strategy {
    /// Every strategy, in the order of the tables and charts.
    pub const ALL: [Strategy; 5] = [
        Strategy::None,
        Strategy::Exponential,
        Strategy::EqualJitter,
        Strategy::FullJitter,
        Strategy::Decorrelated,
    ];

    /// The name used in tables and legends.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Exponential => "exponential",
            Strategy::FullJitter => "full jitter",
            Strategy::EqualJitter => "equal jitter",
            Strategy::Decorrelated => "decorrelated",
        }
    }

    /// The library's backoff for this strategy, or `None` for no backoff.
    pub fn backoff(self) -> Option<Backoff> {
        match self {
            Strategy::None => None,
            Strategy::Exponential => Some(Backoff::exponential(BASE, CAP)),
            Strategy::FullJitter => Some(Backoff::full_jitter(BASE, CAP)),
            Strategy::EqualJitter => Some(Backoff::equal_jitter(BASE, CAP)),
            Strategy::Decorrelated => Some(Backoff::decorrelated_jitter(BASE, CAP)),
        }
    }
}

/// The delays one client waits before its retries 1, 2, 3, … numbered as the
/// article numbers them (see the module docs): the library's own iterator,
/// less its first delay for the strategies with an exponent.
pub fn blog_delays(strategy: Strategy) -> Option<Delays> {
    let backoff = strategy.backoff()?;
    let mut delays = backoff.delays();
    if strategy != Strategy::Decorrelated {
        // The library's retry 0 has exponent 0; the article's first retry has 1.
        delays.next();
    }
    Some(delays)
}

/// What one run of the simulation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trial {
    /// Writes the server received, failed ones included.
    pub writes: u64,
    /// When the last client's successful write reached it back.
    pub time: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Message {
    /// A read request reaches the server.
    Read,
    /// The server's answer to a read reaches the client.
    ReadReply { version: u64 },
    /// A conditional write reaches the server.
    Write { version: u64 },
    /// The server's answer to a write reaches the client.
    WriteReply { ok: bool },
}

/// |Normal(10 ms, 2 ms)| in nanoseconds, by Box-Muller over `rng`.
fn network_delay(rng: &mut fastrand::Rng) -> u64 {
    // `1 - f64()` lies in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - rng.f64();
    let u2 = rng.f64();
    let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (NET_MEAN_NS + NET_SD_NS * normal).abs() as u64
}

/// One run: `clients` clients contend until each has written once.
///
/// `seed` fixes both the network and (through [`resilient::seed_jitter`])
/// the library's jitter.
pub fn run(strategy: Strategy, clients: u32, seed: u64) -> Trial {
    resilient::seed_jitter(seed);
    let mut net = fastrand::Rng::with_seed(seed ^ 0x9E37_79B9_7F4A_7C15);
    let mut backoffs: Vec<Option<Delays>> = (0..clients).map(|_| blog_delays(strategy)).collect();
    // Min-heap of (arrival time in ns, sequence number for ties, client, message).
    let mut queue = BinaryHeap::new();
    let mut seq = 0u64;
    let mut send = |queue: &mut BinaryHeap<_>, at: u64, client: u32, message: Message| {
        seq += 1;
        queue.push(Reverse((at, seq, client, message)));
    };
    for client in 0..clients {
        let at = network_delay(&mut net);
        send(&mut queue, at, client, Message::Read);
    }
    let mut version = 0u64;
    let mut writes = 0u64;
    let mut last = 0u64;
    while let Some(Reverse((now, _, client, message))) = queue.pop() {
        match message {
            Message::Read => {
                let at = now + network_delay(&mut net);
                send(&mut queue, at, client, Message::ReadReply { version });
            }
            Message::ReadReply { version: seen } => {
                let at = now + network_delay(&mut net);
                send(&mut queue, at, client, Message::Write { version: seen });
            }
            Message::Write { version: expected } => {
                writes += 1;
                let ok = expected == version;
                if ok {
                    version += 1;
                }
                let at = now + network_delay(&mut net);
                send(&mut queue, at, client, Message::WriteReply { ok });
            }
            Message::WriteReply { ok: true } => last = last.max(now),
            Message::WriteReply { ok: false } => {
                let wait = backoffs[client as usize]
                    .as_mut()
                    .and_then(Iterator::next)
                    .unwrap_or_default();
                let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
                let at = now + wait + network_delay(&mut net);
                send(&mut queue, at, client, Message::Read);
            }
        }
    }
    debug_assert_eq!(version, u64::from(clients));
    Trial {
        writes,
        time: Duration::from_nanos(last),
    }
}

/// The seed of trial `trial` at `clients` clients: the same for every
/// strategy, so strategies meet the same networks (common random numbers).
pub fn seed(clients: u32, trial: u32) -> u64 {
    // splitmix64 of the pair, so neighbouring cells get unrelated seeds.
    let mut z = (u64::from(clients) << 32 | u64::from(trial)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "the median of nothing");
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The medians of one cell of the table: one strategy at one `N`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    /// The strategy.
    pub strategy: Strategy,
    /// The number of clients.
    pub clients: u32,
    /// Median writes over the trials.
    pub writes: f64,
    /// Median time until the last client succeeded, in milliseconds.
    pub time_ms: f64,
}

/// Runs `trials` trials of one cell and returns every trial, in order.
pub fn trials(strategy: Strategy, clients: u32, trials: u32) -> Vec<Trial> {
    (0..trials)
        .map(|t| run(strategy, clients, seed(clients, t)))
        .collect()
}

/// The medians of the first `k` of `runs`.
pub fn cell(strategy: Strategy, clients: u32, runs: &[Trial], k: usize) -> Cell {
    let runs = &runs[..k.min(runs.len())];
    let mut writes: Vec<f64> = runs.iter().map(|t| t.writes as f64).collect();
    let mut times: Vec<f64> = runs.iter().map(|t| t.time.as_secs_f64() * 1e3).collect();
    Cell {
        strategy,
        clients,
        writes: median(&mut writes),
        time_ms: median(&mut times),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_retry_uses_exponent_one_as_in_the_article() {
        resilient::seed_jitter(1);
        let first = |s| blog_delays(s).unwrap().next().unwrap();
        assert_eq!(first(Strategy::Exponential), BASE * 2);
        for _ in 0..100 {
            assert!(first(Strategy::FullJitter) <= BASE * 2);
            assert!(first(Strategy::EqualJitter) >= BASE);
            let d = first(Strategy::Decorrelated);
            assert!(d >= BASE && d <= BASE * 3, "{d:?}");
        }
        assert!(blog_delays(Strategy::None).is_none());
    }

    #[test]
    fn one_client_writes_once_in_four_network_delays() {
        let t = run(Strategy::None, 1, 7);
        assert_eq!(t.writes, 1);
        assert!(t.time > Duration::from_millis(20) && t.time < Duration::from_millis(60));
    }

    #[test]
    fn a_run_is_reproducible_from_its_seed() {
        assert_eq!(
            run(Strategy::FullJitter, 50, 3),
            run(Strategy::FullJitter, 50, 3)
        );
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
