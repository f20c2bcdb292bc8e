//! A breaker's settings: defaults, the builder, validation, and reading them
//! from configuration files.

use std::fmt;
use std::time::Duration;

use super::State;
use super::core::{MAX_COUNT_WINDOW, MAX_HALF_OPEN_PERMITS, MAX_TIME_WINDOW_SECS};
#[cfg(feature = "serde")]
use crate::config::setting;
use crate::config::{Problem, list};

/// Which outcomes the failure and slow-call rates are computed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlidingWindow {
    /// The last `size` recorded outcomes.
    CountBased {
        /// How many outcomes the window holds.
        size: u32,
    },
    /// The outcomes recorded in the last `seconds` seconds, kept in one bucket
    /// per second.
    TimeBased {
        /// How many seconds the window spans.
        seconds: u32,
    },
}

impl SlidingWindow {
    fn size(self) -> u32 {
        match self {
            SlidingWindow::CountBased { size } => size,
            SlidingWindow::TimeBased { seconds } => seconds,
        }
    }

    #[cfg(feature = "serde")]
    fn with_size(self, size: u32) -> Self {
        match self {
            SlidingWindow::CountBased { .. } => SlidingWindow::CountBased { size },
            SlidingWindow::TimeBased { .. } => SlidingWindow::TimeBased { seconds: size },
        }
    }
}

/// The settings of one circuit breaker.
///
/// [`Default`] gives the defaults of Resilience4j's `CircuitBreakerConfig`, as
/// listed in its documentation (<https://resilience4j.readme.io/docs/circuitbreaker>,
/// "Create and configure a CircuitBreaker"): failure-rate threshold 50 %,
/// slow-call-rate threshold 100 %, slow-call duration threshold 60 s, 10
/// permitted calls in half-open, a count-based window of 100 calls, a minimum
/// of 100 calls, and 60 s in open. Four settings are ours: `honor_retry_after`
/// (default `true`), `open_on_retry_after` (default `false`),
/// `max_retry_after_hold` (default 5 minutes) and `initial_state` (default
/// [`State::Closed`]). See the [`Breaker`](crate::Breaker) documentation,
/// "`Retry-After` and the breaker", for why.
///
/// ```
/// use std::time::Duration;
/// use resilient::{Breaker, BreakerConfig, SlidingWindow};
///
/// let config = BreakerConfig::default()
///     .sliding_window(SlidingWindow::TimeBased { seconds: 30 })
///     .minimum_number_of_calls(20)
///     .wait_duration_in_open_state(Duration::from_secs(10));
/// let breaker = Breaker::new("payments", config).unwrap();
/// assert_eq!(breaker.name(), "payments");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    pub(crate) failure_rate_threshold: f64,
    pub(crate) slow_call_rate_threshold: f64,
    pub(crate) slow_call_duration_threshold: Duration,
    pub(crate) permitted_number_of_calls_in_half_open_state: u32,
    pub(crate) sliding_window: SlidingWindow,
    pub(crate) minimum_number_of_calls: u32,
    pub(crate) wait_duration_in_open_state: Duration,
    pub(crate) honor_retry_after: bool,
    pub(crate) open_on_retry_after: bool,
    pub(crate) max_retry_after_hold: Duration,
    pub(crate) initial_state: State,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_rate_threshold: 50.0,
            slow_call_rate_threshold: 100.0,
            slow_call_duration_threshold: Duration::from_secs(60),
            permitted_number_of_calls_in_half_open_state: 10,
            sliding_window: SlidingWindow::CountBased { size: 100 },
            minimum_number_of_calls: 100,
            wait_duration_in_open_state: Duration::from_secs(60),
            honor_retry_after: true,
            open_on_retry_after: false,
            max_retry_after_hold: BreakerConfig::DEFAULT_MAX_RETRY_AFTER_HOLD,
            initial_state: State::Closed,
        }
    }
}

const INITIAL_STATES: &[(&str, State)] = &[
    ("closed", State::Closed),
    ("disabled", State::Disabled),
    ("forced_open", State::ForcedOpen),
    ("metrics_only", State::MetricsOnly),
];
/// The sizes here are placeholders: a window type keeps the size already
/// read, so `sliding_window_type` and `sliding_window_size` may come in
/// either order.
#[cfg(feature = "serde")]
const WINDOW_TYPES: &[(&str, SlidingWindow)] = &[
    ("count_based", SlidingWindow::CountBased { size: 0 }),
    ("time_based", SlidingWindow::TimeBased { seconds: 0 }),
];

impl BreakerConfig {
    /// The default bound on how long one `Retry-After` holds a breaker open.
    /// Long enough for the `Retry-After` values throttling services commonly
    /// send (seconds to a few minutes); short enough that a broken or hostile
    /// value costs at most one probe every five minutes (after the hold, a probe
    /// asks again, and a new `Retry-After` holds again).
    pub const DEFAULT_MAX_RETRY_AFTER_HOLD: Duration = Duration::from_secs(5 * 60);
    /// The largest accepted `max_retry_after_hold`: one day, the longest break
    /// Polly v8 accepts for its circuit breaker (`BreakDuration`'s range,
    /// <https://pollydocs.org/api/Polly.CircuitBreaker.CircuitBreakerStrategyOptions-1.html>).
    pub const MAX_RETRY_AFTER_HOLD_LIMIT: Duration = Duration::from_secs(24 * 60 * 60);

    /// The longest `wait_duration_in_open_state` accepted: one day, the
    /// upper end of Polly v8's `BreakDuration` range (same page as above).
    pub const MAX_WAIT_IN_OPEN_STATE: Duration = Duration::from_secs(24 * 60 * 60);

    /// The longest `slow_call_duration_threshold` accepted: one day, as for
    /// the library's other durations (`deadline_ms`, `timeout_ms`). A call
    /// that must run longer than a day to count as slow never does in
    /// practice: a threshold past it is a unit slip (seconds written as
    /// milliseconds), or an attempt to turn the check off, which a
    /// `slow_call_rate_threshold` of 100 already says more plainly.
    pub const MAX_SLOW_CALL_DURATION_THRESHOLD: Duration = Duration::from_secs(24 * 60 * 60);

    /// Opens the breaker when at least this percentage of the calls in the
    /// window failed. Accepted: greater than 0, at most 100. Default 50.
    pub fn failure_rate_threshold(mut self, pct: f64) -> Self {
        self.failure_rate_threshold = pct;
        self
    }

    /// Opens the breaker when at least this percentage of the calls in the
    /// window were slow. Accepted: greater than 0, at most 100. Default 100.
    pub fn slow_call_rate_threshold(mut self, pct: f64) -> Self {
        self.slow_call_rate_threshold = pct;
        self
    }

    /// A call that takes longer than this is slow, whether it succeeded or
    /// failed. Accepted: greater than zero, at most one day
    /// ([`MAX_SLOW_CALL_DURATION_THRESHOLD`](Self::MAX_SLOW_CALL_DURATION_THRESHOLD)).
    /// Default 60 s.
    pub fn slow_call_duration_threshold(mut self, threshold: Duration) -> Self {
        self.slow_call_duration_threshold = threshold;
        self
    }

    /// How many probe calls half-open admits; their outcomes decide between
    /// closed and open. Accepted: 1 to 1 048 575. Default 10.
    pub fn permitted_number_of_calls_in_half_open_state(mut self, calls: u32) -> Self {
        self.permitted_number_of_calls_in_half_open_state = calls;
        self
    }

    /// The window the rates are computed over. Accepted sizes: 1 to 1 000 000
    /// calls, or 1 to 86 400 seconds. Default: the last 100 calls.
    pub fn sliding_window(mut self, window: SlidingWindow) -> Self {
        self.sliding_window = window;
        self
    }

    /// How many outcomes the window must hold before any rate is computed.
    /// Must not be zero, nor exceed what the window can hold: a count-based
    /// window's size, or 16 383 calls per second of a time-based one.
    /// Default 100.
    pub fn minimum_number_of_calls(mut self, calls: u32) -> Self {
        self.minimum_number_of_calls = calls;
        self
    }

    /// How long an open breaker rejects calls before it admits probes. More
    /// than zero, at most one day ([`MAX_WAIT_IN_OPEN_STATE`](Self::MAX_WAIT_IN_OPEN_STATE));
    /// configuration files give it in whole milliseconds. Default 60 s.
    pub fn wait_duration_in_open_state(mut self, wait: Duration) -> Self {
        self.wait_duration_in_open_state = wait;
        self
    }

    /// Whether a failure carrying a server's `Retry-After` keeps an open
    /// breaker open for at least that long (never shorter than it already
    /// would). Default `true`. It never opens a closed breaker unless
    /// [`open_on_retry_after`](Self::open_on_retry_after) says so.
    pub fn honor_retry_after(mut self, honor: bool) -> Self {
        self.honor_retry_after = honor;
        self
    }

    /// Whether a single failure carrying a `Retry-After` opens a closed (or
    /// half-open) breaker, for everyone, for that long. Default `false`:
    /// only the sliding window's rates open a closed breaker, since a 429 is
    /// usually about one client's rate, not the dependency's health, and a
    /// shared breaker would turn it into an outage for every caller. Turn it
    /// on for a dependency whose `Retry-After` speaks for all its callers
    /// (a 503 during maintenance, say). Needs `honor_retry_after`.
    pub fn open_on_retry_after(mut self, open: bool) -> Self {
        self.open_on_retry_after = open;
        self
    }

    /// The longest one `Retry-After` holds the breaker open: a longer one
    /// (days, or `Duration::MAX`, from a broken or hostile server) holds it
    /// this long, after which a probe asks the server again. Accepted:
    /// greater than 0, at most one day. Default 5 minutes
    /// ([`BreakerConfig::DEFAULT_MAX_RETRY_AFTER_HOLD`]).
    pub fn max_retry_after_hold(mut self, max: Duration) -> Self {
        self.max_retry_after_hold = max;
        self
    }

    /// The state a new breaker starts in: [`State::Closed`],
    /// [`State::Disabled`], [`State::ForcedOpen`] or [`State::MetricsOnly`].
    /// Default closed.
    pub fn initial_state(mut self, state: State) -> Self {
        self.initial_state = state;
        self
    }

    /// Every setting that makes no sense, as problems naming breaker `name`.
    pub(crate) fn validate(&self, name: &str) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut refuse = |key: &str, value: &dyn fmt::Display, reason: &str| {
            problems.push(Problem::new("breaker", Some(name), key, value, reason));
        };
        for (key, pct) in [
            ("failure_rate_threshold", self.failure_rate_threshold),
            ("slow_call_rate_threshold", self.slow_call_rate_threshold),
        ] {
            if !(pct > 0.0 && pct <= 100.0) {
                refuse(
                    key,
                    &pct,
                    "must be a percentage greater than 0 and at most 100",
                );
            }
        }
        for (key, d) in [
            (
                "slow_call_duration_threshold_ms",
                self.slow_call_duration_threshold,
            ),
            (
                "wait_duration_in_open_state_ms",
                self.wait_duration_in_open_state,
            ),
        ] {
            if d.is_zero() {
                refuse(key, &0, "must be greater than 0 ms");
            }
        }
        let slow = self.slow_call_duration_threshold;
        if slow > BreakerConfig::MAX_SLOW_CALL_DURATION_THRESHOLD {
            refuse(
                "slow_call_duration_threshold_ms",
                &shown_millis(slow),
                &format!(
                    "must be at most {} ms (one day)",
                    BreakerConfig::MAX_SLOW_CALL_DURATION_THRESHOLD.as_millis()
                ),
            );
        }
        // An open wait longer than a day is a unit slip (seconds written as
        // milliseconds times a thousand), not a plan: no dependency is
        // given up on for days by a breaker nobody can see waiting.
        let wait = self.wait_duration_in_open_state;
        if wait > BreakerConfig::MAX_WAIT_IN_OPEN_STATE {
            refuse(
                "wait_duration_in_open_state_ms",
                &shown_millis(wait),
                &format!(
                    "must be at most {} ms (one day)",
                    BreakerConfig::MAX_WAIT_IN_OPEN_STATE.as_millis()
                ),
            );
        }
        let hold = self.max_retry_after_hold;
        if hold.is_zero() || hold > BreakerConfig::MAX_RETRY_AFTER_HOLD_LIMIT {
            refuse(
                "max_retry_after_hold_ms",
                &hold.as_millis(),
                &format!(
                    "must be greater than 0 ms and at most {} ms (one day)",
                    BreakerConfig::MAX_RETRY_AFTER_HOLD_LIMIT.as_millis()
                ),
            );
        }
        if self.open_on_retry_after && !self.honor_retry_after {
            refuse(
                "open_on_retry_after",
                &true,
                "needs `honor_retry_after` = true: a `Retry-After` that is not honoured cannot open the breaker",
            );
        }
        let permitted = self.permitted_number_of_calls_in_half_open_state;
        if permitted == 0 || permitted > MAX_HALF_OPEN_PERMITS {
            refuse(
                "permitted_number_of_calls_in_half_open_state",
                &permitted,
                &format!("must be from 1 to {MAX_HALF_OPEN_PERMITS}"),
            );
        }
        let (size, max, unit) = match self.sliding_window {
            SlidingWindow::CountBased { size } => (size, MAX_COUNT_WINDOW, "calls"),
            SlidingWindow::TimeBased { seconds } => (seconds, MAX_TIME_WINDOW_SECS, "seconds"),
        };
        if size == 0 || size > max {
            refuse(
                "sliding_window_size",
                &size,
                &format!("must be from 1 to {max} {unit}"),
            );
        }
        let minimum = self.minimum_number_of_calls;
        if minimum == 0 {
            refuse(
                "minimum_number_of_calls",
                &minimum,
                "must be greater than 0",
            );
        } else if let Some((seconds, most)) = match self.sliding_window {
            SlidingWindow::TimeBased { seconds } if seconds > 0 && seconds <= max => Some((
                seconds,
                u64::from(seconds) * u64::from(super::core::MAX_CALLS_PER_SECOND),
            )),
            _ => None,
        }
        .filter(|&(_, most)| u64::from(minimum) > most)
        {
            refuse(
                "minimum_number_of_calls",
                &minimum,
                &format!(
                    "must not exceed {most}, the calls a time-based window of {seconds} s counts ({} per second), which could never hold that many",
                    super::core::MAX_CALLS_PER_SECOND
                ),
            );
        } else if matches!(self.sliding_window, SlidingWindow::CountBased { size } if size > 0 && minimum > size)
        {
            let size = self.sliding_window.size();
            // A window made smaller than the default minimum, with the
            // minimum left alone: the operator never wrote this value
            // (review 43), so the message says where it comes from.
            let default = BreakerConfig::default().minimum_number_of_calls;
            let unset = if minimum == default {
                format!(
                    " ({default} is its default: a count-based window under {default} calls needs `minimum_number_of_calls` set too)"
                )
            } else {
                String::new()
            };
            refuse(
                "minimum_number_of_calls",
                &minimum,
                &format!(
                    "must not exceed `sliding_window_size` ({size}) of a count-based window, which could never hold that many calls{unset}"
                ),
            );
        }
        if matches!(self.initial_state, State::Open | State::HalfOpen) {
            refuse(
                "initial_state",
                &format!("\"{}\"", self.initial_state),
                &format!(
                    "expected one of {}",
                    list(INITIAL_STATES.iter().map(|(name, _)| name))
                ),
            );
        }
        problems
    }

    /// Reads a breaker's settings from the keys of a TOML table (the body of
    /// a `[breakers.NAME]` section) and validates them.
    ///
    /// Keys: `failure_rate_threshold` and `slow_call_rate_threshold` (percent),
    /// `slow_call_duration_threshold_ms` and `wait_duration_in_open_state_ms`
    /// (whole milliseconds), `permitted_number_of_calls_in_half_open_state`,
    /// `sliding_window_size` (calls or seconds) and `minimum_number_of_calls`,
    /// `sliding_window_type` (`"count_based"` or `"time_based"`),
    /// `honor_retry_after` and `open_on_retry_after` (booleans),
    /// `max_retry_after_hold_ms` (whole milliseconds) and `initial_state` (`"closed"`,
    /// `"disabled"`, `"forced_open"` or `"metrics_only"`). Missing keys take
    /// the defaults of [`BreakerConfig::default`]; unknown keys are refused. Every refusal, from
    /// parsing or validation, is a [`Problem`](crate::Problem) naming breaker
    /// `name`, the key and the value; all of them are reported at once.
    ///
    /// ```
    /// use resilient::BreakerConfig;
    ///
    /// let err = BreakerConfig::from_toml("payments", "failure_rate_threshold = 150").unwrap_err();
    /// assert_eq!(
    ///     err.problems()[0].to_string(),
    ///     "breaker `payments`: `failure_rate_threshold` = 150: must be a percentage greater than 0 and at most 100",
    /// );
    /// ```
    #[cfg(feature = "toml")]
    pub fn from_toml(name: &str, text: &str) -> Result<BreakerConfig, crate::ConfigError> {
        setting::from_toml(name, text)
    }
}

#[cfg(feature = "serde")]
impl setting::Settings for BreakerConfig {
    const SECTION: &'static str = "breaker";
    const KEYS: &'static [&'static str] = &[
        "failure_rate_threshold",
        "slow_call_rate_threshold",
        "slow_call_duration_threshold_ms",
        "permitted_number_of_calls_in_half_open_state",
        "sliding_window_type",
        "sliding_window_size",
        "minimum_number_of_calls",
        "wait_duration_in_open_state_ms",
        "honor_retry_after",
        "open_on_retry_after",
        "max_retry_after_hold_ms",
        "initial_state",
    ];
    const EXPECTING: &'static str = "a table of circuit breaker settings";

    fn set(&mut self, key: &str, value: &setting::RawValue) -> Result<(), String> {
        match key {
            "failure_rate_threshold" => self.failure_rate_threshold = setting::percentage(value)?,
            "slow_call_rate_threshold" => {
                self.slow_call_rate_threshold = setting::percentage(value)?
            }
            "slow_call_duration_threshold_ms" => {
                self.slow_call_duration_threshold = setting::millis(value)?
            }
            "wait_duration_in_open_state_ms" => {
                self.wait_duration_in_open_state = setting::millis(value)?
            }
            "permitted_number_of_calls_in_half_open_state" => {
                self.permitted_number_of_calls_in_half_open_state =
                    setting::count_within(value, &format!("from 1 to {MAX_HALF_OPEN_PERMITS}"))?
            }
            "sliding_window_size" => {
                let range = format!(
                    "from 1 to {MAX_COUNT_WINDOW} calls (count-based) or {MAX_TIME_WINDOW_SECS} seconds (time-based)"
                );
                self.sliding_window = self
                    .sliding_window
                    .with_size(setting::count_within(value, &range)?)
            }
            "minimum_number_of_calls" => {
                // A time-based window takes any u32; a count-based one at
                // most its size (checked with the other settings).
                let range = format!(
                    "from 1 to {} (and, with a count-based window, at most its size)",
                    u32::MAX
                );
                self.minimum_number_of_calls = setting::count_within(value, &range)?
            }
            "sliding_window_type" => {
                let size = self.sliding_window.size();
                self.sliding_window = setting::one_of(value, WINDOW_TYPES)?.with_size(size);
            }
            "honor_retry_after" => self.honor_retry_after = setting::boolean(value)?,
            "open_on_retry_after" => self.open_on_retry_after = setting::boolean(value)?,
            "max_retry_after_hold_ms" => self.max_retry_after_hold = setting::millis(value)?,
            "initial_state" => self.initial_state = setting::one_of(value, INITIAL_STATES)?,
            _ => unreachable!("keys are checked against KEYS first"),
        }
        Ok(())
    }

    fn problems(&self, name: Option<&str>) -> Vec<Problem> {
        // `Deserialize` has always left range checks to `Breaker::new` and
        // the registry, which know the breaker's name; checking here too
        // would refuse configurations it has accepted.
        name.map_or_else(Vec::new, |name| self.validate(name))
    }
}

/// Reads the keys `failure_rate_threshold`, `slow_call_rate_threshold`,
/// `slow_call_duration_threshold_ms`, `permitted_number_of_calls_in_half_open_state`,
/// `sliding_window_type`, `sliding_window_size`, `minimum_number_of_calls`,
/// `wait_duration_in_open_state_ms`, `honor_retry_after`, `open_on_retry_after`,
/// `max_retry_after_hold_ms` and `initial_state`; missing keys
/// keep their defaults. Unknown keys and values of the wrong kind are
/// errors naming the key and value. Range checks happen when the breaker
/// is built (`Breaker::new`, or the registry), where its name is known.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for BreakerConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        setting::deserialize(deserializer)
    }
}

/// A duration in milliseconds, shown exactly: a whole day and a nanosecond
/// is not "86400000".
fn shown_millis(d: Duration) -> String {
    match d.subsec_nanos() % 1_000_000 {
        0 => d.as_millis().to_string(),
        nanos => {
            let fraction = format!("{nanos:06}");
            format!("{}.{}", d.as_millis(), fraction.trim_end_matches('0'))
        }
    }
}
