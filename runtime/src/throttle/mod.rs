//! Adaptive throttling: a client sheds, locally and at random, the share of
//! its calls that a dependency has lately been refusing anyway.
//!
//! The *Site Reliability Engineering* book (Beyer et al., O'Reilly 2016),
//! chapter 21 "Handling Overload", section "Client-Side Throttling", makes
//! the case: a backend that rejects a request still pays to receive,
//! parse and refuse it, and when nearly every request is refused that cost
//! alone can keep it overloaded. So each client remembers, over the last two
//! minutes, how many requests it attempted (`requests`) and how many the
//! backend accepted (`accepts`), and rejects a new request itself with a
//! probability that grows as accepts fall behind requests.
//!
//! This module owns the throttle and its configuration; its counts live in
//! the lock-free sliding window of `budget/window.rs`, cut in 12 slots.
//!
//! The formula, the argument for K, the window and the sources of the defaults are
//! documented on [`AdaptiveThrottle`], where users read them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::budget::window::{self, Window};
use crate::budget::{MAX_WINDOW, window_out_of_range};
use crate::config::{ConfigError, Problem};
use crate::sync::atomic::{AtomicU64, Ordering};

const SECTION: &str = "throttle";
const SLOTS: usize = 12;
const DEFAULT_K: f64 = 2.0;
/// The SRE book's two minutes of history.
const DEFAULT_WINDOW: Duration = Duration::from_secs(120);

const REQUESTS: usize = window::FIRST;
const ACCEPTS: usize = window::SECOND;

/// How an [`AdaptiveThrottle`] sheds: the multiplier `k` (default 2.0, at
/// least 1) and the window its counts cover (default 120 s, at least
/// 1 ms and at most a day). See the [`AdaptiveThrottle`] for both.
///
/// ```
/// use std::time::Duration;
/// use resilient::{AdaptiveThrottle, ThrottleConfig};
///
/// let config = ThrottleConfig::default().k(1.5).window(Duration::from_secs(60));
/// let throttle = AdaptiveThrottle::new("search", config)?;
/// assert_eq!(throttle.name(), "search");
/// # Ok::<(), resilient::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ThrottleConfig {
    k: f64,
    window: Duration,
}

impl Default for ThrottleConfig {
    /// K = 2 over two minutes, as in the SRE book.
    fn default() -> Self {
        Self {
            k: DEFAULT_K,
            window: DEFAULT_WINDOW,
        }
    }
}

impl ThrottleConfig {
    /// The multiplier K: the client sends up to `k` times what the backend
    /// accepts. Key `k`.
    pub fn k(mut self, k: f64) -> Self {
        self.k = k;
        self
    }

    /// How far back requests and accepts are counted. Key `window_ms`.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Every range problem of this configuration for the throttle `name`.
    pub(crate) fn validate(&self, name: &str) -> Vec<Problem> {
        self.problems(Some(name))
    }

    fn problems(&self, name: Option<&str>) -> Vec<Problem> {
        let mut problems = Vec::new();
        // NaN fails the comparison and is refused with the rest.
        if !(self.k >= 1.0 && self.k.is_finite()) {
            problems.push(Problem::new(
                SECTION,
                name,
                "k",
                self.k,
                "must be a finite number of at least 1 (the SRE book uses 2); below 1 the client \
                 would shed calls the backend accepts",
            ));
        }
        if let Some(shown) = window_out_of_range(self.window) {
            problems.push(Problem::new(
                SECTION,
                name,
                "window_ms",
                shown,
                format!(
                    "must be at least 1 ms and at most {} (a day): its twelve slots must \
                     each span some time",
                    MAX_WINDOW.as_millis()
                ),
            ));
        }
        problems
    }
}

#[cfg(feature = "serde")]
impl crate::config::setting::Settings for ThrottleConfig {
    const SECTION: &'static str = SECTION;
    const KEYS: &'static [&'static str] = &["k", "window_ms"];
    const EXPECTING: &'static str = "an adaptive throttle's settings";

    fn set(&mut self, key: &str, value: &crate::config::setting::RawValue) -> Result<(), String> {
        use crate::config::setting;
        match key {
            "k" => self.k = setting::number(value)?,
            "window_ms" => self.window = setting::millis(value)?,
            _ => unreachable!("keys are checked against KEYS first"),
        }
        Ok(())
    }

    fn problems(&self, name: Option<&str>) -> Vec<Problem> {
        ThrottleConfig::problems(self, name)
    }
}

/// Reads the keys `k` and `window_ms`; unknown keys and out-of-range values
/// are errors naming the key.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for ThrottleConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::config::setting::deserialize(deserializer)
    }
}

#[cfg(feature = "toml")]
impl ThrottleConfig {
    /// Reads the configuration of the throttle `name` from a TOML table of
    /// keys, reporting every problem at once.
    ///
    /// ```
    /// let config = resilient::ThrottleConfig::from_toml("search", "k = 1.5\nwindow_ms = 60000")?;
    /// # let _ = config;
    /// # Ok::<(), resilient::ConfigError>(())
    /// ```
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        crate::config::setting::from_toml(name, text)
    }
}

/// Client-side adaptive throttling for one dependency, shared (in an
/// `Arc`) by every call to it.
///
/// A backend that rejects a request still pays to receive, parse and refuse
/// it; when nearly every request is refused, that cost alone can keep it
/// overloaded. The *Site Reliability Engineering* book (Beyer et al.,
/// O'Reilly 2016), chapter 21 "Handling Overload", section "Client-Side
/// Throttling", has each client count, over the last two minutes, the
/// requests it attempted (`requests`) and those the backend accepted
/// (`accepts`), and reject a new request itself with probability
///
/// ```text
/// max(0, (requests - K × accepts) / (requests + 1))
/// ```
///
/// While the backend accepts everything, `requests = accepts` and nothing is
/// shed. (Annotated calls count a request when its answer is in, with its
/// accept. By hand, [`admit`](Self::admit) counts the request as it is
/// sent and [`on_outcome`](Self::on_outcome) its accept when the answer
/// comes: requests in flight count as not yet accepted, so a throttle with
/// little history may shed while several are in flight.) Once it accepts fewer than `1/K` of the requests, the client sends
/// roughly `K × accepts` and sheds the rest; a shed request still counts in
/// `requests`, so the pressure to shed persists until the backend accepts
/// again. The book recommends K = 2: it lets through twice what the backend
/// is currently accepting, wasting some backend work but letting the client
/// notice a recovery quickly; a smaller K sheds more aggressively, a larger
/// one less. We refuse K below 1, which would shed requests the backend is
/// accepting. The default window is the book's two minutes.
///
/// The window slides in twelfths (10 s steps at the default two minutes):
/// a count leaves it between 11/12 and 12/12 of `window` after it was made.
/// Counting takes no lock. The draws come from the crate's seedable
/// generator, so tests fix them with [`seed_jitter`](crate::seed_jitter).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use tokio::time::Instant;
/// let throttle = resilient::AdaptiveThrottle::new("search", Default::default()).unwrap();
/// if throttle.admit(Instant::now()) {
///     let accepted = true; // the backend answered, even with a permanent error
///     throttle.on_outcome(accepted, Instant::now());
/// }
/// # }
/// ```
pub struct AdaptiveThrottle {
    name: Arc<str>,
    /// When it was made, as `crate::time::ticks`: its windows count from
    /// there, so they line up with its own clock (and with tokio's paused
    /// one in tests), whatever the process's age.
    origin: u64,
    k: f64,
    window_length: Duration,
    window: Window,
    shed: AtomicU64,
}

impl fmt::Debug for AdaptiveThrottle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveThrottle")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl AdaptiveThrottle {
    /// A throttle named `name` (the dependency it guards), or every problem
    /// with `config` or the name (a registry's rule for names).
    pub fn new(name: impl Into<Arc<str>>, config: ThrottleConfig) -> Result<Self, ConfigError> {
        let name = name.into();
        ConfigError::of_part("throttle", &name, config.validate(&name))?;
        Ok(Self::from_validated(name, config))
    }

    /// A throttle from a configuration [`ThrottleConfig::validate`]
    /// accepted.
    pub(crate) fn from_validated(name: Arc<str>, config: ThrottleConfig) -> Self {
        let nanos = crate::time::nanos(config.window);
        Self {
            name,
            origin: crate::time::ticks(Instant::now()),
            k: config.k,
            window_length: config.window,
            window: Window::new(nanos / SLOTS as u64, SLOTS),
            shed: AtomicU64::new(0),
        }
    }

    /// The name of the dependency this throttle guards.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn nanos(&self, now: Instant) -> u64 {
        crate::time::ticks(now).saturating_sub(self.origin)
    }

    fn probability(&self, requests: u64, accepts: u64) -> f64 {
        let requests = requests as f64;
        ((requests - self.k * accepts as f64) / (requests + 1.0)).max(0.0)
    }

    /// Counts a request and decides whether to send it: `false` means shed
    /// it locally (the caller returns a load-shed error without calling the
    /// dependency). A shed request counts as a request, as in the SRE book,
    /// so that shedding goes on while the backend keeps refusing.
    pub fn admit(&self, now: Instant) -> bool {
        let now = self.nanos(now);
        let (requests, accepts) = self.window.totals(now);
        let p = self.probability(requests, accepts);
        self.window.add(now, REQUESTS);
        // No draw when nothing is to be shed, so a healthy dependency does
        // not consume the seeded sequence other draws depend on.
        if p > 0.0 && crate::rng::unit() < p {
            self.shed.fetch_add(1, Ordering::Relaxed);
            false
        } else {
            true
        }
    }

    /// The engine's form of [`admit`](AdaptiveThrottle::admit): decides
    /// whether to shed the call, counting it as a request only if shed. A
    /// call that goes ahead is counted by [`record`](AdaptiveThrottle::record)
    /// once its outcome is known, so a call cancelled by its caller, or
    /// refused by a bulkhead, never counts as rejected by the backend.
    pub(crate) fn shed(&self, now: Instant) -> bool {
        let now = self.nanos(now);
        let (requests, accepts) = self.window.totals(now);
        let p = self.probability(requests, accepts);
        if p > 0.0 && crate::rng::unit() < p {
            self.window.add(now, REQUESTS);
            self.shed.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Counts one request that reached the backend, and whether it accepted it.
    pub(crate) fn record(&self, accepted: bool, now: Instant) {
        const _: () = assert!(REQUESTS == window::FIRST && ACCEPTS == window::SECOND);
        self.window.add_pair(self.nanos(now), accepted);
    }

    /// Records whether the backend accepted a request admitted by
    /// [`admit`](AdaptiveThrottle::admit). `accepted` is `true` for a
    /// success and for a permanent failure (the backend did the work and
    /// answered; a malformed request is the caller's problem, not
    /// overload), `false` for a throttled, transient or do-not-retry
    /// failure or a timeout: the signs of a backend refusing or unable to take the work.
    /// (Annotated calls record theirs this way themselves.)
    pub fn on_outcome(&self, accepted: bool, now: Instant) {
        if accepted {
            self.window.add(self.nanos(now), ACCEPTS);
        }
    }

    /// The probability that [`admit`](Self::admit) sheds a call made at
    /// `now`.
    pub fn rejection_probability(&self, now: Instant) -> f64 {
        let (requests, accepts) = self.window.totals(self.nanos(now));
        self.probability(requests, accepts)
    }

    /// What the throttle holds now.
    pub fn snapshot(&self) -> ThrottleSnapshot {
        let (requests, accepts) = self.window.totals(self.nanos(Instant::now()));
        ThrottleSnapshot {
            name: self.name.to_string(),
            k: self.k,
            window: self.window_length,
            requests,
            accepts,
            rejection_probability: self.probability(requests, accepts),
            shed: self.shed.load(Ordering::Relaxed),
        }
    }
}

/// What an [`AdaptiveThrottle`] holds at one moment: plain data for
/// metrics and health pages.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ThrottleSnapshot {
    /// The throttle's name.
    pub name: String,
    /// Its multiplier K.
    pub k: f64,
    /// The window its counts cover.
    pub window: Duration,
    /// Requests counted in the window, shed ones included.
    pub requests: u64,
    /// Requests the backend accepted in the window.
    pub accepts: u64,
    /// The probability that the next call is shed.
    pub rejection_probability: f64,
    /// Calls shed since the throttle was made.
    pub shed: u64,
}
