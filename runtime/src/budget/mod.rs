//! Retry budgets: how many retries a client may add to the load on one
//! dependency, shared by every call to it.
//!
//! Why a budget and not only a per-call limit: when a dependency is
//! overloaded, every call fails and every call retries, so per-call limits
//! multiply the load exactly when it hurts most. A per-client budget (the SRE
//! book's 10% of requests) caps what retries can add. The full argument, the
//! two kinds and the sources of their defaults are on [`RetryBudget`], where
//! users read them.
//!
//! This module owns the budget and its configuration, and two pieces the
//! other overload-control parts share or mirror:
//!
//! * `window.rs`: the lock-free sliding window of two counts, used here for
//!   (requests, retries) and by adaptive throttling for (requests, accepts);
//! * `tokens.rs`: gRPC's fixed-point token bucket.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

#[cfg(feature = "serde")]
use crate::config::setting;
use crate::config::{ConfigError, Problem};
use crate::outcome::Outcome;
use crate::sync::atomic::{AtomicU64, Ordering};

mod tokens;
pub(crate) mod window;
#[cfg(test)]
mod window_tests;

use tokens::{MILLI, Tokens};
use window::Window;

const SECTION: &str = "budget";
/// Parts per unit of the fixed-point ratio: a ratio such as 0.29 times 100
/// requests is exactly 29 retries, which `f64` arithmetic does not promise.
const PPM: u64 = 1_000_000;
/// The ratio budget's window is cut in this many slots: one per second at
/// the default 10 s window.
const RATIO_SLOTS: usize = 10;
/// The longest window accepted. Longer windows would remember an outage
/// long after recovery, and their slot arithmetic in nanoseconds would
/// approach `u64`'s range.
pub(crate) const MAX_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);
/// The shortest window accepted: `window_ms` counts whole milliseconds.
pub(crate) const MIN_WINDOW: Duration = Duration::from_millis(1);

/// A window outside [`MIN_WINDOW`]..=[`MAX_WINDOW`], as a start-up error
/// shows it (budgets and throttles alike): a window set in code below a
/// millisecond as given (`1ns`), not as the `0` of its whole
/// milliseconds; any other in milliseconds. `None` for a window in range.
pub(crate) fn window_out_of_range(window: Duration) -> Option<impl fmt::Display> {
    struct Shown(Duration);
    impl fmt::Display for Shown {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.0 < MIN_WINDOW && !self.0.is_zero() {
                write!(f, "{:?}", self.0)
            } else {
                write!(f, "{}", self.0.as_millis())
            }
        }
    }
    (window < MIN_WINDOW || window > MAX_WINDOW).then_some(Shown(window))
}

const DEFAULT_RATIO: f64 = 0.1;
const DEFAULT_WINDOW: Duration = Duration::from_secs(10);
const DEFAULT_MIN_RETRIES_PER_SECOND: u32 = 10;
const DEFAULT_MAX_TOKENS: u32 = 10;
const DEFAULT_TOKEN_RATIO: f64 = 0.1;
/// gRPC caps `maxTokens` at 1000.
const MAX_MAX_TOKENS: u32 = 1000;
const MAX_RATIO: f64 = 1000.0;

/// Which way a [`RetryBudget`] decides.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum BudgetKind {
    /// Retries under a ratio of recent requests, plus a per-second reserve
    /// (Finagle, tower). `kind = "ratio"`.
    Ratio,
    /// gRPC's token bucket, drained by failures and refilled by successes.
    /// `kind = "token_bucket"`.
    TokenBucket,
}

impl BudgetKind {
    #[cfg(feature = "serde")]
    const NAMES: &'static [&'static str] = &["ratio", "token_bucket"];

    fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Ratio => "ratio",
            BudgetKind::TokenBucket => "token_bucket",
        }
    }
}

impl fmt::Display for BudgetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a [`RetryBudget`] decides. Made with [`BudgetConfig::ratio`],
/// [`BudgetConfig::token_bucket`] or [`Default`] (a ratio budget with every
/// default), adjusted with the setters, checked by [`RetryBudget::new`].
///
/// Settings that belong to the other kind are refused rather than ignored:
/// a `window` on a token bucket would silently do nothing.
///
/// ```
/// use std::time::Duration;
/// use resilient::{BudgetConfig, RetryBudget};
///
/// let config = BudgetConfig::ratio(0.2)
///     .window(Duration::from_secs(30))
///     .min_retries_per_second(5);
/// let budget = RetryBudget::new("payments", config)?;
/// assert_eq!(budget.name(), "payments");
///
/// let grpc_like = RetryBudget::new("search", BudgetConfig::token_bucket(100, 0.5))?;
/// # let _ = grpc_like;
/// # Ok::<(), resilient::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetConfig {
    kind: BudgetKind,
    // `None`: not set, the default applies. Kept apart from the default so
    // that a setting of the other kind can be refused.
    ratio: Option<f64>,
    window: Option<Duration>,
    min_retries_per_second: Option<u32>,
    /// As written (a file may say more than `u32` holds): `problems` refuses
    /// what is out of range, naming the value written.
    max_tokens: Option<u64>,
    token_ratio: Option<f64>,
}

impl Default for BudgetConfig {
    /// A ratio budget: 10% of the requests of the last 10 s, plus 10
    /// retries per second.
    fn default() -> Self {
        Self {
            kind: BudgetKind::Ratio,
            ratio: None,
            window: None,
            min_retries_per_second: None,
            max_tokens: None,
            token_ratio: None,
        }
    }
}

impl BudgetConfig {
    /// A ratio budget allowing retries up to `ratio` of the requests of the
    /// window (0.1: one retry per ten requests; 0, or from 0.000001, the
    /// millionths it counts in, to 1000).
    pub fn ratio(ratio: f64) -> Self {
        Self {
            ratio: Some(ratio),
            ..Self::default()
        }
    }

    /// A gRPC-style token bucket of `max_tokens` tokens (1 to 1000), which
    /// each success refills by `token_ratio` (at least 0.001, gRPC's
    /// precision).
    pub fn token_bucket(max_tokens: u32, token_ratio: f64) -> Self {
        Self {
            kind: BudgetKind::TokenBucket,
            max_tokens: Some(u64::from(max_tokens)),
            token_ratio: Some(token_ratio),
            ..Self::default()
        }
    }

    /// Ratio budgets only: how far back requests and retries are counted
    /// (default 10 s; at least 1 ms, at most a day). Key `window_ms`.
    ///
    /// The window slides in tenths (one-second steps at the default): a
    /// count leaves it between 9/10 and 10/10 of `window` after it was made.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// Ratio budgets only: retries allowed per second of window whatever
    /// the ratio says (default 10). Key `min_retries_per_second`. The
    /// budget grants whole retries: unless 0, it must make at least one
    /// over the window (10 per second needs a window of 100 ms or more).
    pub fn min_retries_per_second(mut self, retries: u32) -> Self {
        self.min_retries_per_second = Some(retries);
        self
    }

    /// Which kind of budget this is.
    pub fn kind(&self) -> BudgetKind {
        self.kind
    }

    fn ratio_value(&self) -> f64 {
        self.ratio.unwrap_or(DEFAULT_RATIO)
    }
    fn window_value(&self) -> Duration {
        self.window.unwrap_or(DEFAULT_WINDOW)
    }
    fn min_retries_value(&self) -> u32 {
        self.min_retries_per_second
            .unwrap_or(DEFAULT_MIN_RETRIES_PER_SECOND)
    }
    fn max_tokens_value(&self) -> u64 {
        self.max_tokens.unwrap_or(u64::from(DEFAULT_MAX_TOKENS))
    }
    fn token_ratio_value(&self) -> f64 {
        self.token_ratio.unwrap_or(DEFAULT_TOKEN_RATIO)
    }

    /// Every range problem of this configuration for the budget `name`.
    pub(crate) fn validate(&self, name: &str) -> Vec<Problem> {
        self.problems(Some(name))
    }

    fn problems(&self, name: Option<&str>) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut refuse = |key: &str, value: &dyn fmt::Display, reason: String| {
            problems.push(Problem::new(SECTION, name, key, value, reason));
        };
        let (own, other) = match self.kind {
            BudgetKind::Ratio => (BudgetKind::Ratio, BudgetKind::TokenBucket),
            BudgetKind::TokenBucket => (BudgetKind::TokenBucket, BudgetKind::Ratio),
        };
        let misplaced = |key: &str| {
            format!(
                "`{key}` applies only to `kind = \"{other}\"`, and this budget is `kind = \"{own}\"`; \
                 remove it or set `kind = \"{other}\"`"
            )
        };
        match self.kind {
            BudgetKind::Ratio => {
                if let Some(v) = self.max_tokens {
                    refuse("max_tokens", &v, misplaced("max_tokens"));
                }
                if let Some(v) = self.token_ratio {
                    refuse("token_ratio", &v, misplaced("token_ratio"));
                }
                let ratio = self.ratio_value();
                let min_retries = self.min_retries_value();
                if !(0.0..=MAX_RATIO).contains(&ratio) {
                    refuse(
                        "ratio",
                        &ratio,
                        format!(
                            "must be a number from 0 to {MAX_RATIO} (0.1 allows one retry per ten requests)"
                        ),
                    );
                } else if ratio > 0.0 && ratio_ppm(ratio) == 0 {
                    // Counted in millionths: a smaller ratio would be 0.
                    refuse(
                        "ratio",
                        &ratio,
                        "must be 0 or at least 0.000001 (one retry per million requests, \
                         the smallest ratio the budget counts)"
                            .to_owned(),
                    );
                } else if ratio == 0.0 && min_retries == 0 {
                    refuse(
                        "ratio",
                        &ratio,
                        "with `min_retries_per_second = 0` too, the budget would refuse every retry; \
                         raise one of them, or give the function no retries instead"
                            .to_owned(),
                    );
                }
                let window = self.window_value();
                if let Some(shown) = window_out_of_range(window) {
                    refuse(
                        "window_ms",
                        &shown,
                        format!(
                            "must be at least 1 ms and at most {} (a day)",
                            MAX_WINDOW.as_millis()
                        ),
                    );
                } else if min_retries > 0 && reserve(min_retries, window) == 0 {
                    // The budget grants whole retries: a floor under one
                    // retry per window would be none at all.
                    let whole = 1000u128.div_ceil(window.as_millis().max(1));
                    refuse(
                        "min_retries_per_second",
                        &min_retries,
                        format!(
                            "over a window of {} ms this is less than one retry, and the budget \
                             grants whole retries; raise it to at least {whole}, or lengthen \
                             `window_ms` to at least {} ms",
                            window.as_millis(),
                            1000u32.div_ceil(min_retries),
                        ),
                    );
                }
            }
            BudgetKind::TokenBucket => {
                if let Some(v) = self.ratio {
                    refuse("ratio", &v, misplaced("ratio"));
                }
                if let Some(v) = self.window {
                    refuse("window_ms", &v.as_millis(), misplaced("window_ms"));
                }
                if let Some(v) = self.min_retries_per_second {
                    refuse(
                        "min_retries_per_second",
                        &v,
                        misplaced("min_retries_per_second"),
                    );
                }
                let max = self.max_tokens_value();
                if max == 0 || max > u64::from(MAX_MAX_TOKENS) {
                    refuse(
                        "max_tokens",
                        &max,
                        format!("must be from 1 to {MAX_MAX_TOKENS}, as in gRPC's `maxTokens`"),
                    );
                }
                let ratio = self.token_ratio_value();
                // NaN fails both comparisons, so it is refused too.
                if !(ratio >= 0.001 && ratio <= f64::from(MAX_MAX_TOKENS)) {
                    refuse(
                        "token_ratio",
                        &ratio,
                        format!(
                            "must be from 0.001 (gRPC keeps three decimal places) to {MAX_MAX_TOKENS}; \
                             0 would never refill the bucket"
                        ),
                    );
                }
            }
        }
        problems
    }
}

#[cfg(feature = "serde")]
impl setting::Settings for BudgetConfig {
    const SECTION: &'static str = SECTION;
    const KEYS: &'static [&'static str] = &[
        "kind",
        "ratio",
        "window_ms",
        "min_retries_per_second",
        "max_tokens",
        "token_ratio",
    ];
    const EXPECTING: &'static str = "a retry budget's settings";

    fn set(&mut self, key: &str, value: &setting::RawValue) -> Result<(), String> {
        match key {
            "kind" => {
                self.kind = match setting::string(value)? {
                    "ratio" => BudgetKind::Ratio,
                    "token_bucket" => BudgetKind::TokenBucket,
                    _ => {
                        return Err(format!(
                            "unknown kind; accepted kinds are {}",
                            crate::config::list(BudgetKind::NAMES)
                        ));
                    }
                }
            }
            "ratio" => self.ratio = Some(setting::number(value)?),
            "window_ms" => self.window = Some(setting::millis(value)?),
            "min_retries_per_second" => {
                let v = setting::count(value)?;
                self.min_retries_per_second =
                    Some(u32::try_from(v).map_err(|_| format!("must be at most {}", u32::MAX))?);
            }
            "max_tokens" => {
                // Out-of-range values are stored as written, for `problems`
                // to refuse.
                self.max_tokens = Some(setting::count(value)?);
            }
            "token_ratio" => self.token_ratio = Some(setting::number(value)?),
            _ => unreachable!("keys are checked against KEYS first"),
        }
        Ok(())
    }

    fn problems(&self, name: Option<&str>) -> Vec<Problem> {
        BudgetConfig::problems(self, name)
    }
}

/// Reads the keys `kind` (`"ratio"` or `"token_bucket"`), `ratio`,
/// `window_ms`, `min_retries_per_second`, `max_tokens` and `token_ratio`;
/// unknown keys, misplaced keys and out-of-range values are errors naming
/// the key.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for BudgetConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        setting::deserialize(deserializer)
    }
}

#[cfg(feature = "toml")]
impl BudgetConfig {
    /// Reads the configuration of the budget `name` from a TOML table of
    /// keys, reporting every problem at once.
    ///
    /// ```
    /// let config = resilient::BudgetConfig::from_toml("payments", r#"
    ///     kind = "token_bucket"
    ///     max_tokens = 20
    ///     token_ratio = 0.5
    /// "#)?;
    /// assert_eq!(config.kind(), resilient::BudgetKind::TokenBucket);
    ///
    /// let err = resilient::BudgetConfig::from_toml("payments", "ratio = -1").unwrap_err();
    /// assert_eq!(err.problems()[0].key(), "ratio");
    /// # Ok::<(), resilient::ConfigError>(())
    /// ```
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        setting::from_toml(name, text)
    }
}

enum Policy {
    Ratio {
        window: Window,
        ratio_ppm: u64,
        /// `min_retries_per_second × window`, in retries.
        reserve: u64,
    },
    Tokens(Tokens),
}

/// Which of the window's counts is which.
const REQUESTS: usize = window::FIRST;
const RETRIES: usize = window::SECOND;

/// A retry budget for one dependency, shared (in an `Arc`) by every call to
/// it.
///
/// A per-call retry limit (three attempts, say) is not enough. When a
/// dependency is overloaded every call fails, every call retries, and the
/// dependency receives three times the traffic that overloaded it. The
/// *Site Reliability Engineering* book (Beyer et al., O'Reilly 2016),
/// chapter 21 "Handling Overload", section "Deciding to Retry", answers with
/// a per-client budget: a request is retried only while retries stay below
/// 10% of the client's requests, so a client can at most add 10% to the
/// load of a struggling backend, while the occasional failure against a
/// healthy one is still retried. A [`RetryBudget`] is that budget, one per
/// named dependency, consulted by every retry to it.
///
/// Two kinds are offered ([`BudgetKind`]):
///
/// * **Ratio** (the default): retries are allowed while the retries of the
///   last `window` stay under `ratio` of its requests, plus a reserve of
///   `min_retries_per_second × window` so that a client sending one request a
///   minute can still retry it. Finagle's `RetryBudget` and tower's
///   `TpsBudget` work this way. The default ratio, 0.1, is the SRE book's 10%
///   (Finagle allows 20%). The default window (10 s) and reserve (10
///   retries per second) are Finagle's: a window long enough to smooth out
///   bursts, short enough to notice a recovery within seconds. The window is
///   configurable because tests, and services that must react faster, need
///   shorter ones.
/// * **Token bucket**: gRPC's retry throttling ("A6: gRPC Retry Design",
///   section "Throttling Retry Attempts and Hedged RPCs"). The bucket starts
///   full at `max_tokens`; each failed attempt takes one token, each success
///   gives back `token_ratio`; retries are allowed only while more than half
///   the tokens remain. It has no window: it reacts to the recent balance of
///   failures and successes, whatever their rate. The defaults (10 tokens,
///   0.1 per success) are the example in the gRPC design.
///
/// Both are lock-free: asking for a retry, counting a request or an outcome
/// takes no lock and allocates nothing.
///
/// The `#[resilient]` functions drive it; it can also be driven by hand:
/// [`on_request`](Self::on_request) once per call,
/// [`on_success`](Self::on_success) / [`on_failure`](Self::on_failure)
/// after each attempt, and [`try_retry`](Self::try_retry) before each retry.
pub struct RetryBudget {
    name: Arc<str>,
    /// When it was made, as `crate::time::ticks`: its windows count from
    /// there, so they line up with its own clock (and with tokio's paused
    /// one in tests), whatever the process's age.
    origin: u64,
    policy: Policy,
    granted: AtomicU64,
    refused: AtomicU64,
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl RetryBudget {
    /// A budget named `name` (the dependency it guards), or every problem
    /// with `config` or the name (a registry's rule for names).
    pub fn new(
        name: impl Into<Arc<str>>,
        config: BudgetConfig,
    ) -> Result<RetryBudget, ConfigError> {
        let name = name.into();
        ConfigError::of_part("budget", &name, config.validate(&name))?;
        Ok(Self::from_validated(name, config))
    }

    /// A budget from a configuration [`BudgetConfig::validate`] accepted.
    pub(crate) fn from_validated(name: Arc<str>, config: BudgetConfig) -> RetryBudget {
        let policy = match config.kind {
            BudgetKind::Ratio => {
                let window = config.window_value();
                let nanos = crate::time::nanos(window);
                Policy::Ratio {
                    window: Window::new(nanos / RATIO_SLOTS as u64, RATIO_SLOTS),
                    ratio_ppm: ratio_ppm(config.ratio_value()),
                    reserve: reserve(config.min_retries_value(), window),
                }
            }
            BudgetKind::TokenBucket => Policy::Tokens(Tokens::new(
                config.max_tokens_value().saturating_mul(MILLI),
                (config.token_ratio_value() * MILLI as f64).round() as u64,
            )),
        };
        Self {
            name,
            origin: crate::time::ticks(Instant::now()),
            policy,
            granted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The name of the dependency this budget guards.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn nanos(&self, now: Instant) -> u64 {
        crate::time::ticks(now).saturating_sub(self.origin)
    }

    /// Counts one call (its first attempt, not its retries), which earns
    /// a ratio budget `ratio` of a retry. A token bucket ignores it.
    pub fn on_request(&self, now: Instant) {
        if let Policy::Ratio { window, .. } = &self.policy {
            window.add(self.nanos(now), REQUESTS);
        }
    }

    /// Records the outcome of one attempt: a token bucket loses a token per
    /// failure and gains `token_ratio` per success; an ignored (permanent)
    /// outcome changes nothing, as in gRPC, where only failures with a
    /// retryable code drain the bucket (also when the server's pushback
    /// said not to retry: [`Classification::DoNotRetry`](crate::Classification::DoNotRetry)). A ratio budget ignores outcomes.
    pub(crate) fn on_outcome(&self, outcome: Outcome) {
        if let Policy::Tokens(tokens) = &self.policy {
            match outcome {
                Outcome::Success => tokens.on_success(),
                Outcome::Failure { .. } => tokens.on_failure(),
                Outcome::Ignored => {}
            }
        }
    }

    /// Records a successful attempt (see [`on_request`](Self::on_request)).
    pub fn on_success(&self, now: Instant) {
        let _ = now; // outcomes are counted whenever they come
        self.on_outcome(Outcome::Success);
    }

    /// Records an attempt that failed in a way worth retrying: transient,
    /// throttled, or timed out. Permanent failures are not recorded.
    pub fn on_failure(&self, now: Instant) {
        let _ = now;
        self.on_outcome(Outcome::Failure { retry_after: None });
    }

    /// Asks for one retry: `true` when the budget allows it, in which case
    /// it is counted against the budget; `false` when the caller must give
    /// up and return the last failure.
    pub fn try_retry(&self, now: Instant) -> bool {
        let allowed = self.try_retry_held(now);
        if allowed {
            self.count_granted();
        }
        allowed
    }

    /// [`try_retry`](Self::try_retry) for a retry that may still not be
    /// made: a refusal is counted, a grant only once the retry is made
    /// ([`count_granted`](Self::count_granted)); a grant not used is given
    /// back ([`give_back`](Self::give_back)), and `granted` never counts it.
    pub(crate) fn try_retry_held(&self, now: Instant) -> bool {
        let allowed = match &self.policy {
            Policy::Ratio {
                window,
                ratio_ppm,
                reserve,
            } => {
                let (ratio_ppm, reserve) = (*ratio_ppm, *reserve);
                window.try_add(self.nanos(now), RETRIES, |requests, retries| {
                    retries < allowance(requests, ratio_ppm, reserve)
                })
            }
            Policy::Tokens(tokens) => tokens.allows_retry(),
        };
        if !allowed {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        allowed
    }

    /// A retry granted by [`try_retry_held`](Self::try_retry_held) goes out.
    pub(crate) fn count_granted(&self) {
        self.granted.fetch_add(1, Ordering::Relaxed);
    }

    /// Gives back a retry granted by [`try_retry`](Self::try_retry) at
    /// `now` that was then not made (another budget on the path refused
    /// it): the window forgets it. A token bucket's grant takes nothing, so
    /// it has nothing to give back. A grant given back was never counted
    /// in `granted` (a monotonic counter for metrics).
    pub(crate) fn give_back(&self, now: Instant) {
        if let Policy::Ratio { window, .. } = &self.policy {
            window.remove(self.nanos(now), RETRIES);
        }
    }

    /// What the budget holds now.
    pub fn snapshot(&self) -> BudgetSnapshot {
        let granted = self.granted.load(Ordering::Relaxed);
        let refused = self.refused.load(Ordering::Relaxed);
        let name = self.name.to_string();
        match &self.policy {
            Policy::Ratio {
                window,
                ratio_ppm,
                reserve,
            } => {
                let (requests, retries) = window.totals(self.nanos(Instant::now()));
                BudgetSnapshot {
                    name,
                    kind: BudgetKind::Ratio,
                    requests,
                    retries,
                    remaining: allowance(requests, *ratio_ppm, *reserve).saturating_sub(retries),
                    tokens: None,
                    granted,
                    refused,
                }
            }
            Policy::Tokens(tokens) => {
                let milli = tokens.milli();
                let half = tokens.max() / 2;
                // Failures until the count is no longer above half, each
                // taking a whole token.
                let remaining = if milli > half {
                    (milli - half - 1) / MILLI + 1
                } else {
                    0
                };
                BudgetSnapshot {
                    name,
                    kind: BudgetKind::TokenBucket,
                    requests: 0,
                    retries: 0,
                    remaining,
                    tokens: Some(milli as f64 / MILLI as f64),
                    granted,
                    refused,
                }
            }
        }
    }
}

/// A ratio as the budget counts it: retries per million requests.
fn ratio_ppm(ratio: f64) -> u64 {
    (ratio * PPM as f64).round() as u64
}

/// The retries a ratio budget grants whatever the requests: the floor of
/// `min_retries_per_second` over the window, in whole retries.
fn reserve(min_retries_per_second: u32, window: Duration) -> u64 {
    u64::from(min_retries_per_second)
        .saturating_mul(u64::try_from(window.as_millis()).unwrap_or(u64::MAX))
        / 1000
}

/// Retries a ratio budget allows for `requests` requests in its window.
fn allowance(requests: u64, ratio_ppm: u64, reserve: u64) -> u64 {
    let earned = u128::from(requests) * u128::from(ratio_ppm) / u128::from(PPM);
    u64::try_from(earned)
        .unwrap_or(u64::MAX)
        .saturating_add(reserve)
}

/// What a [`RetryBudget`] holds at one moment: plain data for metrics and
/// health pages.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BudgetSnapshot {
    /// The budget's name.
    pub name: String,
    /// Its kind.
    pub kind: BudgetKind,
    /// Ratio budgets: calls counted in the window. Token buckets: 0.
    pub requests: u64,
    /// Ratio budgets: retries granted in the window. Token buckets: 0.
    pub retries: u64,
    /// Ratio budgets: retries the budget would grant now. Token buckets:
    /// failures that would make it refuse retries (0: it refuses now).
    pub remaining: u64,
    /// Token buckets: the tokens left. Ratio budgets: `None`.
    pub tokens: Option<f64>,
    /// Retries granted since the budget was made (a counter). For an
    /// annotated function, a grant is counted when its retry's attempt is
    /// admitted and goes out: not one given back because another budget on
    /// the path refused the retry, because the call was dropped during its
    /// backoff (or its wait for a bulkhead slot), or because a breaker,
    /// bulkhead or throttle refused the attempt (`retries` does not count
    /// those either; `resilient_retries_total`, the function's retries,
    /// counts a retry refused so, as an attempt `refused`). The refusal
    /// seen is the retrying function's own: when the budget is that of a
    /// call nested inside it (asked first, as nearest the dependency), and
    /// that call's own breaker or bulkhead refuses the retry, the grant is
    /// still spent and counted, which can only make the budget refuse
    /// sooner.
    pub granted: u64,
    /// Retries refused since the budget was made.
    pub refused: u64,
}
