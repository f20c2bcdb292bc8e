//! A breaker's settings: defaults, the builder, validation, and reading them
//! from configuration files.

use std::fmt;
use std::time::Duration;

use super::State;
use super::core::{MAX_COUNT_WINDOW, MAX_HALF_OPEN_PERMITS, MAX_TIME_WINDOW_SECS};
use crate::config::Problem;

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
/// of 100 calls, and 60 s in open. Two settings are ours: `honor_retry_after`
/// (default `true`) and `initial_state` (default [`State::Closed`]).
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
            initial_state: State::Closed,
        }
    }
}

#[cfg(feature = "serde")]
const KEYS: &[&str] = &[
    "failure_rate_threshold",
    "slow_call_rate_threshold",
    "slow_call_duration_threshold_ms",
    "permitted_number_of_calls_in_half_open_state",
    "sliding_window_type",
    "sliding_window_size",
    "minimum_number_of_calls",
    "wait_duration_in_open_state_ms",
    "honor_retry_after",
    "initial_state",
];
#[cfg(feature = "serde")]
const WINDOW_TYPES: &[&str] = &["count_based", "time_based"];
const INITIAL_STATES: &[&str] = &["closed", "disabled", "forced_open", "metrics_only"];

fn listed(items: &[&str]) -> String {
    items
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl BreakerConfig {
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
    /// failed. Must not be zero. Default 60 s.
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
    /// Must not be zero, nor exceed a count-based window's size. Default 100.
    pub fn minimum_number_of_calls(mut self, calls: u32) -> Self {
        self.minimum_number_of_calls = calls;
        self
    }

    /// How long an open breaker rejects calls before it admits probes. Must
    /// not be zero. Default 60 s.
    pub fn wait_duration_in_open_state(mut self, wait: Duration) -> Self {
        self.wait_duration_in_open_state = wait;
        self
    }

    /// Whether a failure carrying a server's `Retry-After` opens the breaker
    /// for at least that long. Default `true`.
    pub fn honor_retry_after(mut self, honor: bool) -> Self {
        self.honor_retry_after = honor;
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
        } else if matches!(self.sliding_window, SlidingWindow::CountBased { size } if size > 0 && minimum > size)
        {
            let size = self.sliding_window.size();
            refuse(
                "minimum_number_of_calls",
                &minimum,
                &format!(
                    "must not exceed `sliding_window_size` ({size}) of a count-based window, which could never hold that many calls"
                ),
            );
        }
        if matches!(self.initial_state, State::Open | State::HalfOpen) {
            refuse(
                "initial_state",
                &format!("\"{}\"", self.initial_state),
                &format!("expected one of {}", listed(INITIAL_STATES)),
            );
        }
        problems
    }

    #[cfg(feature = "serde")]
    /// Sets `key` from a value read from a file; `Err` holds the value as
    /// written and the reason it was refused. Range checks are left to
    /// [`BreakerConfig::validate`], so that files and the builder share them.
    fn apply(&mut self, key: &str, value: &RawValue) -> Result<(), (String, String)> {
        let refuse = |reason: String| Err((value.to_string(), reason));
        match key {
            "failure_rate_threshold" | "slow_call_rate_threshold" => {
                let pct = match *value {
                    RawValue::Int(i) => i as f64,
                    RawValue::Float(f) => f,
                    _ => return refuse(format!("expected a percentage, found {}", value.kind())),
                };
                if key == "failure_rate_threshold" {
                    self.failure_rate_threshold = pct;
                } else {
                    self.slow_call_rate_threshold = pct;
                }
            }
            "slow_call_duration_threshold_ms" | "wait_duration_in_open_state_ms" => {
                let ms = match *value {
                    RawValue::Int(ms) if ms < 0 => return refuse("must not be negative".into()),
                    RawValue::Int(ms) => Duration::from_millis(ms as u64),
                    _ => {
                        return refuse(format!(
                            "expected whole milliseconds, found {}",
                            value.kind()
                        ));
                    }
                };
                if key == "slow_call_duration_threshold_ms" {
                    self.slow_call_duration_threshold = ms;
                } else {
                    self.wait_duration_in_open_state = ms;
                }
            }
            "permitted_number_of_calls_in_half_open_state"
            | "sliding_window_size"
            | "minimum_number_of_calls" => {
                let n = match *value {
                    RawValue::Int(n) if n < 0 => return refuse("must not be negative".into()),
                    RawValue::Int(n) => match u32::try_from(n) {
                        Ok(n) => n,
                        Err(_) => return refuse(format!("must be at most {}", u32::MAX)),
                    },
                    _ => return refuse(format!("expected a whole number, found {}", value.kind())),
                };
                match key {
                    "permitted_number_of_calls_in_half_open_state" => {
                        self.permitted_number_of_calls_in_half_open_state = n
                    }
                    "sliding_window_size" => self.sliding_window = self.sliding_window.with_size(n),
                    _ => self.minimum_number_of_calls = n,
                }
            }
            "sliding_window_type" => {
                let size = self.sliding_window.size();
                self.sliding_window = match value {
                    RawValue::Str(s) if s == "count_based" => SlidingWindow::CountBased { size },
                    RawValue::Str(s) if s == "time_based" => {
                        SlidingWindow::TimeBased { seconds: size }
                    }
                    _ => return refuse(format!("expected one of {}", listed(WINDOW_TYPES))),
                };
            }
            "initial_state" => {
                self.initial_state = match value {
                    RawValue::Str(s) if s == "closed" => State::Closed,
                    RawValue::Str(s) if s == "disabled" => State::Disabled,
                    RawValue::Str(s) if s == "forced_open" => State::ForcedOpen,
                    RawValue::Str(s) if s == "metrics_only" => State::MetricsOnly,
                    _ => return refuse(format!("expected one of {}", listed(INITIAL_STATES))),
                };
            }
            "honor_retry_after" => match *value {
                RawValue::Bool(b) => self.honor_retry_after = b,
                _ => {
                    return refuse(format!(
                        "expected `true` or `false`, found {}",
                        value.kind()
                    ));
                }
            },
            _ => return refuse(format!("unknown key; accepted keys are {}", listed(KEYS))),
        }
        Ok(())
    }

    /// Reads a breaker's settings from the keys of a TOML table (the body of
    /// a `[breakers.NAME]` section) and validates them.
    ///
    /// Keys: `failure_rate_threshold` and `slow_call_rate_threshold` (percent),
    /// `slow_call_duration_threshold_ms` and `wait_duration_in_open_state_ms`
    /// (whole milliseconds), `permitted_number_of_calls_in_half_open_state`,
    /// `sliding_window_size` (calls or seconds) and `minimum_number_of_calls`,
    /// `sliding_window_type` (`"count_based"` or `"time_based"`),
    /// `honor_retry_after` (boolean) and `initial_state` (`"closed"`,
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
        let table = match text.parse::<toml::Table>() {
            Ok(table) => table,
            Err(e) => {
                let reason = format!("not a TOML table of settings: {}", e.message());
                let problem =
                    Problem::new("breaker", Some(name), "(document)", text.trim(), reason);
                return Err(crate::ConfigError::one(problem));
            }
        };
        let mut config = BreakerConfig::default();
        let mut problems = Vec::new();
        for (key, value) in &table {
            let raw = match value {
                toml::Value::Integer(i) => RawValue::Int(*i),
                toml::Value::Float(f) => RawValue::Float(*f),
                toml::Value::String(s) => RawValue::Str(s.clone()),
                toml::Value::Boolean(b) => RawValue::Bool(*b),
                other => RawValue::Other {
                    kind: match other.type_str() {
                        "array" => "an array",
                        "table" => "a table",
                        _ => "a date-time",
                    },
                    shown: other.to_string(),
                },
            };
            if let Err((value, reason)) = config.apply(key, &raw) {
                problems.push(Problem::new(
                    "breaker",
                    Some(name),
                    key.as_str(),
                    value,
                    reason,
                ));
            }
        }
        problems.extend(config.validate(name));
        crate::ConfigError::from_problems(problems).map(|()| config)
    }
}

/// A setting's value as written in a file, before it is checked against its key.
#[cfg(feature = "serde")]
#[derive(Debug, Clone, PartialEq)]
enum RawValue {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Other { kind: &'static str, shown: String },
}

#[cfg(feature = "serde")]
impl RawValue {
    fn kind(&self) -> &'static str {
        match self {
            RawValue::Int(_) => "an integer",
            RawValue::Float(_) => "a float",
            RawValue::Str(_) => "a string",
            RawValue::Bool(_) => "a boolean",
            RawValue::Other { kind, .. } => kind,
        }
    }
}

#[cfg(feature = "serde")]
impl fmt::Display for RawValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RawValue::Int(i) => write!(f, "{i}"),
            RawValue::Float(x) => write!(f, "{x}"),
            RawValue::Str(s) => write!(f, "{s:?}"),
            RawValue::Bool(b) => write!(f, "{b}"),
            RawValue::Other { shown, .. } => f.write_str(shown),
        }
    }
}

#[cfg(feature = "serde")]
mod de {
    use std::fmt;

    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

    use super::{BreakerConfig, RawValue};

    impl<'de> de::Deserialize<'de> for RawValue {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct RawVisitor;
            impl<'de> Visitor<'de> for RawVisitor {
                type Value = RawValue;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a number, string or boolean")
                }
                fn visit_bool<E>(self, v: bool) -> Result<RawValue, E> {
                    Ok(RawValue::Bool(v))
                }
                fn visit_i64<E>(self, v: i64) -> Result<RawValue, E> {
                    Ok(RawValue::Int(v))
                }
                fn visit_u64<E>(self, v: u64) -> Result<RawValue, E> {
                    Ok(i64::try_from(v).map_or(RawValue::Float(v as f64), RawValue::Int))
                }
                fn visit_f64<E>(self, v: f64) -> Result<RawValue, E> {
                    Ok(RawValue::Float(v))
                }
                fn visit_str<E>(self, v: &str) -> Result<RawValue, E> {
                    Ok(RawValue::Str(v.to_owned()))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawValue, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(RawValue::Other {
                        kind: "an array",
                        shown: "[...]".into(),
                    })
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawValue, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(RawValue::Other {
                        kind: "a table",
                        shown: "{...}".into(),
                    })
                }
            }
            deserializer.deserialize_any(RawVisitor)
        }
    }

    /// Reads the keys `failure_rate_threshold`, `slow_call_rate_threshold`,
    /// `slow_call_duration_threshold_ms`, `permitted_number_of_calls_in_half_open_state`,
    /// `sliding_window_type`, `sliding_window_size`, `minimum_number_of_calls`,
    /// `wait_duration_in_open_state_ms`, `honor_retry_after` and `initial_state`; missing keys
    /// keep their defaults. Unknown keys and values of the wrong kind are
    /// errors naming the key and value. Range checks happen when the breaker
    /// is built (`Breaker::new`, or the registry), where its name is known.
    impl<'de> de::Deserialize<'de> for BreakerConfig {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct ConfigVisitor;
            impl<'de> Visitor<'de> for ConfigVisitor {
                type Value = BreakerConfig;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a table of circuit breaker settings")
                }
                fn visit_map<A: MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<BreakerConfig, A::Error> {
                    let mut config = BreakerConfig::default();
                    let mut seen = Vec::new();
                    while let Some(key) = map.next_key::<String>()? {
                        let value = map.next_value::<RawValue>()?;
                        if seen.contains(&key) {
                            return Err(de::Error::custom(format_args!(
                                "`{key}` set more than once"
                            )));
                        }
                        config.apply(&key, &value).map_err(|(value, reason)| {
                            de::Error::custom(format_args!("`{key}` = {value}: {reason}"))
                        })?;
                        seen.push(key);
                    }
                    Ok(config)
                }
            }
            deserializer.deserialize_map(ConfigVisitor)
        }
    }
}
