//! Refused configuration: what every configurable part reports when a value
//! makes no sense, so that a bad setting stops the program at start-up with a
//! message naming the part, the key and the value.
//!
//! `setting.rs` (feature `serde`) owns the one reader of configuration maps
//! and TOML tables that every part's `Deserialize` and `from_toml` go
//! through, so that their refusals are worded alike.

use std::fmt;

#[cfg(feature = "serde")]
pub(crate) mod setting;

/// `` `a`, `b`, `c` ``: for messages listing what is accepted.
pub(crate) fn list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|item| format!("`{}`", item.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One refused setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    section: &'static str,
    name: Option<String>,
    key: String,
    value: String,
    reason: String,
}

impl Problem {
    /// A refused `key = value` in the part `section` (`"breaker"`, `"budget"`,
    /// `"bulkhead"`, `"throttle"`, `"registry"`) named `name`.
    pub(crate) fn new(
        section: &'static str,
        name: Option<&str>,
        key: impl Into<String>,
        value: impl fmt::Display,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            section,
            name: name.map(str::to_owned),
            key: key.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// The kind of part: `"breaker"`, `"budget"`, `"bulkhead"`, `"throttle"` or `"registry"`.
    pub fn section(&self) -> &str {
        self.section
    }
    /// The part's name, e.g. `payments`, when the setting belongs to a named part.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    /// The refused key, e.g. `failure_rate_threshold`.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The refused value, as written.
    pub fn value(&self) -> &str {
        &self.value
    }
    /// Why it was refused and what is accepted.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{} `{}`: ", self.section, name)?,
            None => write!(f, "{}: ", self.section)?,
        }
        write!(f, "`{}` = {}: {}", self.key, self.value, self.reason)
    }
}

/// A configuration was refused. Lists every problem found, not just the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<Problem>,
}

impl ConfigError {
    pub(crate) fn from_problems(problems: Vec<Problem>) -> Result<(), Self> {
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Self { problems })
        }
    }

    #[cfg(feature = "toml")]
    pub(crate) fn one(problem: Problem) -> Self {
        Self {
            problems: vec![problem],
        }
    }

    /// Every refused setting.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid resilience configuration")?;
        for p in &self.problems {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}
