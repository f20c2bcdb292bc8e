//! Reading every part's configuration (breaker, budget, throttle, bulkhead)
//! from serde maps and TOML tables, one key at a time, so that every refusal
//! names its key and the value as written.
//!
//! A derived `Deserialize` would report "invalid type: floating point, expected
//! u64" without saying which key, would accept a negative duration only to
//! fail in a `Duration` conversion with a message of its own, and would stop
//! at the first problem. Here each value is read as a [`RawValue`], handed to
//! the configuration's own setter, and range checks run once, in the same
//! `validate` that builder-made configurations go through.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::{Problem, did_you_mean, list};

/// A setting's value before the configuration interprets it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RawValue {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    /// A value of no type any key accepts (a table, an array, a date, an
    /// integer beyond `i64`): what it is, for "found ..." in messages, and
    /// the value as text.
    Other {
        kind: &'static str,
        shown: String,
    },
}

impl RawValue {
    /// What the value is, as in "expected a number, found a string".
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            RawValue::Int(_) => "an integer",
            RawValue::Float(_) => "a float",
            RawValue::Str(_) => "a string",
            RawValue::Bool(_) => "a boolean",
            RawValue::Other { kind, .. } => kind,
        }
    }
}

impl fmt::Display for RawValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RawValue::Int(v) => write!(f, "{v}"),
            RawValue::Float(v) => write!(f, "{v:?}"),
            RawValue::Str(v) => write!(f, "{v:?}"),
            RawValue::Bool(v) => write!(f, "{v}"),
            RawValue::Other { shown, .. } => f.write_str(shown),
        }
    }
}

/// The kind of a whole number beyond `i64`: no key takes one, and saying so
/// beats "expected a whole number" for what is one.
const TOO_LARGE: &str = "an integer beyond 9223372036854775807";

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
                Ok(i64::try_from(v).map_or_else(
                    |_| RawValue::Other {
                        kind: TOO_LARGE,
                        shown: v.to_string(),
                    },
                    RawValue::Int,
                ))
            }
            fn visit_f64<E>(self, v: f64) -> Result<RawValue, E> {
                Ok(RawValue::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<RawValue, E> {
                Ok(RawValue::Str(v.to_owned()))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawValue, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(RawValue::Other {
                    kind: "an array",
                    shown: "[...]".to_owned(),
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawValue, A::Error> {
                while map
                    .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(RawValue::Other {
                    kind: "a table",
                    shown: "{...}".to_owned(),
                })
            }
        }
        deserializer.deserialize_any(RawVisitor)
    }
}

#[cfg(feature = "toml")]
impl From<&toml::Value> for RawValue {
    fn from(value: &toml::Value) -> Self {
        match value {
            toml::Value::Integer(v) => RawValue::Int(*v),
            toml::Value::Float(v) => RawValue::Float(*v),
            toml::Value::String(v) => RawValue::Str(v.clone()),
            toml::Value::Boolean(v) => RawValue::Bool(*v),
            toml::Value::Array(_) => RawValue::Other {
                kind: "an array",
                shown: value.to_string(),
            },
            toml::Value::Table(_) => RawValue::Other {
                kind: "a table",
                shown: value.to_string(),
            },
            toml::Value::Datetime(_) => RawValue::Other {
                kind: "a date-time",
                shown: value.to_string(),
            },
        }
    }
}

#[cfg(feature = "toml")]
impl From<&toml::de::DeValue<'_>> for RawValue {
    fn from(value: &toml::de::DeValue<'_>) -> Self {
        use toml::de::DeValue;
        match value {
            DeValue::String(v) => RawValue::Str(v.to_string()),
            DeValue::Integer(v) => i64::from_str_radix(v.as_str(), v.radix()).map_or_else(
                |_| RawValue::Other {
                    kind: TOO_LARGE,
                    shown: v.to_string(),
                },
                RawValue::Int,
            ),
            DeValue::Float(v) => v.as_str().parse().map_or_else(
                |_| RawValue::Other {
                    kind: "a float",
                    shown: v.to_string(),
                },
                RawValue::Float,
            ),
            DeValue::Boolean(v) => RawValue::Bool(*v),
            DeValue::Datetime(v) => RawValue::Other {
                kind: "a date-time",
                shown: v.to_string(),
            },
            DeValue::Array(_) => RawValue::Other {
                kind: "an array",
                shown: "[...]".to_owned(),
            },
            DeValue::Table(_) => RawValue::Other {
                kind: "a table",
                shown: "{...}".to_owned(),
            },
        }
    }
}

/// "expected `what`, found `value`'s kind": the type error every helper
/// gives.
fn expected(what: &str, value: &RawValue) -> String {
    format!("expected {what}, found {}", value.kind())
}

/// A number; integers are accepted where a fraction is.
pub(crate) fn number(value: &RawValue) -> Result<f64, String> {
    fraction(value, "a number")
}

/// A percentage, read like a number but named as one in messages.
pub(crate) fn percentage(value: &RawValue) -> Result<f64, String> {
    fraction(value, "a percentage")
}

fn fraction(value: &RawValue, what: &str) -> Result<f64, String> {
    match value {
        RawValue::Float(v) => Ok(*v),
        RawValue::Int(v) => Ok(*v as f64),
        _ => Err(expected(what, value)),
    }
}

/// A count: a whole number, not negative, that fits in `u64`.
pub(crate) fn count(value: &RawValue) -> Result<u64, String> {
    match value {
        RawValue::Int(v) if *v < 0 => Err("must not be negative".to_owned()),
        RawValue::Int(v) => Ok(*v as u64),
        _ => Err(expected("a whole number", value)),
    }
}

/// A count the key allows up to `range`'s end, refused with the key's own
/// range (not the width of the type it is kept in) when it is larger.
pub(crate) fn count_within(value: &RawValue, range: &str) -> Result<u32, String> {
    u32::try_from(count(value)?).map_err(|_| format!("must be {range}"))
}

/// A duration written as whole milliseconds. Read as `i64` so that a
/// negative value gets its own message instead of a type error.
pub(crate) fn millis(value: &RawValue) -> Result<Duration, String> {
    match value {
        RawValue::Int(v) if *v < 0 => Err("must not be negative".to_owned()),
        RawValue::Int(v) => Ok(Duration::from_millis(*v as u64)),
        _ => Err(expected("whole milliseconds", value)),
    }
}

/// A string.
pub(crate) fn string(value: &RawValue) -> Result<&str, String> {
    match value {
        RawValue::Str(v) => Ok(v),
        _ => Err(expected("a string", value)),
    }
}

/// `true` or `false`.
pub(crate) fn boolean(value: &RawValue) -> Result<bool, String> {
    match value {
        RawValue::Bool(v) => Ok(*v),
        _ => Err(expected("`true` or `false`", value)),
    }
}

/// One of the names in `accepted`, as the value paired with it; anything
/// else is refused listing the names.
pub(crate) fn one_of<T: Copy>(value: &RawValue, accepted: &[(&str, T)]) -> Result<T, String> {
    let names = || {
        format!(
            "expected one of {}",
            list(accepted.iter().map(|(name, _)| name))
        )
    };
    match value {
        RawValue::Str(v) => accepted
            .iter()
            .find(|(name, _)| name == v)
            .map(|&(_, value)| value)
            .ok_or_else(names),
        _ => Err(format!("{}, found {}", names(), value.kind())),
    }
}

/// A configuration that can be read key by key.
pub(crate) trait Settings: Default {
    /// The section its problems are reported under.
    const SECTION: &'static str;
    /// Every key it accepts, for the unknown-key message.
    const KEYS: &'static [&'static str];
    /// What the configuration is, for serde's "expected ..." messages.
    const EXPECTING: &'static str;

    /// Sets `key` from `value`: type and sign checks only; ranges are
    /// `problems`' business.
    fn set(&mut self, key: &str, value: &RawValue) -> Result<(), String>;

    /// Every range problem, as `validate` reports them; `name` is `None` on
    /// the serde path, which has no name for the part.
    fn problems(&self, name: Option<&str>) -> Vec<Problem>;
}

fn unknown_key<T: Settings>(key: &str) -> String {
    format!(
        "unknown key; {}accepted keys are {}",
        did_you_mean(key, T::KEYS),
        list(T::KEYS)
    )
}

/// Sets every key of a map, then validates. A `Deserialize` has no name
/// for the part, so its errors read "`key` = value: reason".
pub(crate) fn deserialize<'de, D: Deserializer<'de>, T: Settings>(
    deserializer: D,
) -> Result<T, D::Error> {
    struct MapVisitor<T>(std::marker::PhantomData<T>);
    impl<'de, T: Settings> Visitor<'de> for MapVisitor<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(T::EXPECTING)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
            let mut config = T::default();
            let mut seen: Vec<String> = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                let value: RawValue = map.next_value()?;
                if seen.contains(&key) {
                    return Err(de::Error::custom(format!(
                        "{}: `{key}` set more than once (set twice; keep one)",
                        T::SECTION
                    )));
                }
                let result = if T::KEYS.contains(&key.as_str()) {
                    config.set(&key, &value)
                } else {
                    Err(unknown_key::<T>(&key))
                };
                if let Err(reason) = result {
                    return Err(de::Error::custom(format!(
                        "{}: `{key}` = {value}: {reason}",
                        T::SECTION
                    )));
                }
                seen.push(key);
            }
            let problems = config.problems(None);
            if problems.is_empty() {
                Ok(config)
            } else {
                let all: Vec<String> = problems.iter().map(ToString::to_string).collect();
                Err(de::Error::custom(all.join("; ")))
            }
        }
    }
    deserializer.deserialize_map(MapVisitor(std::marker::PhantomData))
}

/// The problems `config`'s checks find, less those about a key whose
/// value could not be read (`unread`: the problems found reading): such a
/// key holds its default, which the user did not write, so a check of it,
/// or of another key against it (the checks name such a key in backticks,
/// alone or with its value: `` `kind = "ratio"` ``), would report a value
/// that is not in the file.
#[cfg(feature = "toml")]
fn checked<T: Settings>(config: &T, name: &str, unread: &[Problem]) -> Vec<Problem> {
    let mut checks = config.problems(Some(name));
    checks.retain(|problem| {
        !unread.iter().any(|read| {
            let key = read.key();
            let reason = problem.reason();
            problem.key() == key
                || reason.contains(&format!("`{key}`"))
                || reason.contains(&format!("`{key} ="))
        })
    });
    checks
}

/// Reads the keys of one part's table in a configuration file and
/// validates them, reporting every problem at once, each placed at its key
/// (range problems, found once every key is read, at the key they name, or
/// at the table when they name none).
#[cfg(feature = "toml")]
pub(crate) fn from_located_entries<T: Settings>(
    name: &str,
    entries: &[(String, RawValue, super::Location)],
    table: &super::Location,
) -> Result<T, Vec<Problem>> {
    let mut config = T::default();
    let mut problems = Vec::new();
    for (key, value, location) in entries {
        let result = if T::KEYS.contains(&key.as_str()) {
            config.set(key, value)
        } else {
            Err(unknown_key::<T>(key))
        };
        if let Err(reason) = result {
            problems.push(
                Problem::new(T::SECTION, Some(name), key.as_str(), value, reason)
                    .at(location.clone()),
            );
        }
    }
    for problem in checked(&config, name, &problems) {
        let location = entries
            .iter()
            .find(|(key, _, _)| key == problem.key())
            .map_or(table, |(_, _, location)| location);
        problems.push(problem.at(location.clone()));
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

/// The value written after a key that ends at byte `key_end` of `text`, on
/// its line (`60` in `failure_rate_threshold = 60`); empty if there is
/// none.
#[cfg(feature = "toml")]
pub(crate) fn value_after_key(text: &str, key_end: usize) -> &str {
    text.get(key_end..)
        .and_then(|rest| rest.lines().next())
        .and_then(|line| line.trim_start().strip_prefix('='))
        .unwrap_or("")
        .trim()
}

/// Parses `text` as a TOML table of keys and validates it, reporting every
/// problem at once, each naming the section, `name`, the key and the value.
#[cfg(feature = "toml")]
pub(crate) fn from_toml<T: Settings>(name: &str, text: &str) -> Result<T, crate::ConfigError> {
    let table: toml::Table = match text.parse() {
        Ok(table) => table,
        Err(e) => {
            let e: toml::de::Error = e;
            let excerpt = e.span().and_then(|s| text.get(s)).unwrap_or("").trim();
            // A key written twice: named, with the value of the repeat.
            if e.message().trim() == "duplicate key" {
                let repeat = e.span().map_or("", |s| value_after_key(text, s.end));
                return Err(crate::ConfigError::one(Problem::new(
                    T::SECTION,
                    Some(name),
                    excerpt.trim_matches('"'),
                    repeat,
                    "set more than once; write each key once",
                )));
            }
            let reason = format!("not valid TOML: {}", e.message());
            return Err(crate::ConfigError::one(Problem::new(
                T::SECTION,
                Some(name),
                "(syntax)",
                format_args!("{excerpt:?}"),
                reason,
            )));
        }
    };
    let mut config = T::default();
    let mut problems = Vec::new();
    for (key, value) in &table {
        let value = RawValue::from(value);
        let result = if T::KEYS.contains(&key.as_str()) {
            config.set(key, &value)
        } else {
            Err(unknown_key::<T>(key))
        };
        if let Err(reason) = result {
            problems.push(Problem::new(
                T::SECTION,
                Some(name),
                key.as_str(),
                &value,
                reason,
            ));
        }
    }
    let checks = checked(&config, name, &problems);
    problems.extend(checks);
    if !problems.is_empty() {
        // Each value as the text writes it (`1e9`, `nan`), as a file read
        // by the registry shows it.
        if let Ok(doc) = toml::de::DeTable::parse(text) {
            problems = as_written(problems, doc.get_ref(), text);
        }
    }
    crate::ConfigError::from_problems(problems)?;
    Ok(config)
}

/// `problems`, each with its value as `text` writes it under its key in
/// `table` (a table read from `text`, with the spans of its values).
#[cfg(feature = "toml")]
pub(crate) fn as_written(
    problems: Vec<Problem>,
    table: &toml::de::DeTable<'_>,
    text: &str,
) -> Vec<Problem> {
    problems
        .into_iter()
        .map(|problem| {
            let written = table
                .iter()
                .find(|(key, _)| key.get_ref() == problem.key())
                .and_then(|(_, value)| text.get(value.span()));
            match written {
                Some(written) => problem.written(written),
                None => problem,
            }
        })
        .collect()
}
