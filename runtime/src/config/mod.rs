//! Refused configuration: what every configurable part reports when a value
//! makes no sense, so that a bad setting stops the program at start-up with a
//! message naming the part, the key and the value.
//!
//! `setting.rs` (feature `serde`) owns the one reader of configuration maps
//! and TOML tables that every part's `Deserialize` and `from_toml` go
//! through, so that their refusals are worded alike. `name.rs` owns the rule
//! for the names of parts, shared with the attribute.

use std::fmt;
use std::sync::Arc;

mod name;
#[cfg(feature = "serde")]
pub(crate) mod setting;

pub(crate) use name::check_name;

/// `` `a`, `b`, `c` ``: for messages listing what is accepted.
pub(crate) fn list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|item| format!("`{}`", item.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `` did you mean `x`? `` for a name close to one of `known` (a letter
/// or two off, two letters swapped counting as one, or one a prefix of the
/// other, as `slow_call_duration_threshold` of
/// `slow_call_duration_threshold_ms`); empty when none is. For messages
/// about an unknown key or section, before the list of accepted ones.
#[cfg(feature = "serde")]
pub(crate) fn did_you_mean(given: &str, known: &[&str]) -> String {
    nearest(given, known).map_or_else(String::new, |k| format!("did you mean `{k}`? "))
}

/// The name of `known` that [`did_you_mean`] suggests for `given`, if any.
#[cfg(feature = "serde")]
pub(crate) fn nearest<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    let given_lower = given.to_ascii_lowercase();
    let given_chars = given_lower.chars().count();
    known
        .iter()
        .filter(|k| **k != given)
        .filter_map(|k| {
            let k_chars = k.chars().count();
            // One a prefix of the other, the shorter of at least 4
            // characters: `kind` is not `k` misspelt.
            let prefix = given_chars.min(k_chars) >= 4
                && (k.starts_with(given_lower.as_str()) || given_lower.starts_with(*k));
            let distance = if prefix {
                0
            } else {
                strsim::osa_distance(&given_lower, k)
            };
            // A letter or two off, in proportion, and never the whole
            // name: `x` is not `k` misspelt either.
            (distance <= (k_chars / 4).clamp(1, 3) && distance < k_chars).then_some((distance, *k))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// One refused setting.
///
/// Its `Display` is one line an operator can act on: where it is (file,
/// line and column, and the TOML table, when it came from a file), which
/// part, which key, the value as written, and why it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    section: &'static str,
    name: Option<String>,
    key: String,
    value: String,
    reason: String,
    location: Option<Location>,
}

/// Where in a configuration file a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    /// The file, when the text was read from one.
    pub(crate) file: Option<Arc<str>>,
    /// 1-based.
    pub(crate) line: usize,
    /// 1-based, in characters.
    pub(crate) column: usize,
    /// The TOML table the problem is in, e.g. `breakers.payments`.
    pub(crate) table: Option<String>,
}

impl Location {
    /// The line and column of byte `offset` of `text`.
    #[cfg(feature = "toml")]
    pub(crate) fn at(text: &str, offset: usize, file: Option<&Arc<str>>) -> Self {
        let before = text.get(..offset).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Location {
            file: file.cloned(),
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
            table: None,
        }
    }
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
            location: None,
        }
    }

    /// A problem with a part as a whole (not one of its keys), such as a
    /// name that is used but not configured.
    pub(crate) fn part(section: &'static str, name: &str, reason: impl Into<String>) -> Self {
        Self::new(section, Some(name), "", "", reason)
    }

    /// A problem with a configuration file as a whole (not a part's key):
    /// it cannot be read, is not valid TOML, has an unknown section.
    #[cfg_attr(not(feature = "toml"), allow(dead_code))]
    pub(crate) fn of_file(reason: impl Into<String>) -> Self {
        Self::new("registry", None, "", "", reason)
    }

    /// The same problem, with its value as the file writes it (`1e9`,
    /// `nan`, `[1, 2]`), where the value was read and shown otherwise;
    /// on one line.
    #[cfg(feature = "toml")]
    pub(crate) fn written(mut self, text: &str) -> Self {
        if !self.value.is_empty() {
            self.value = text.split_whitespace().collect::<Vec<_>>().join(" ");
        }
        self
    }

    /// The same problem, placed in a file.
    #[cfg_attr(not(feature = "toml"), allow(dead_code))]
    pub(crate) fn at(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }

    /// The kind of part: `"breaker"`, `"budget"`, `"bulkhead"`, `"throttle"` or `"registry"`.
    pub fn section(&self) -> &str {
        self.section
    }
    /// The part's name, e.g. `payments`, when the setting belongs to a named part.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    /// The refused key, e.g. `failure_rate_threshold`; empty when the
    /// problem is with the part as a whole (a name used but not configured).
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The refused value, as written; empty when there is none.
    pub fn value(&self) -> &str {
        &self.value
    }
    /// Why it was refused and what is accepted.
    pub fn reason(&self) -> &str {
        &self.reason
    }
    /// The file the setting was read from, when it was read from one
    /// (`RegistryBuilder::toml_file`, feature `toml`).
    pub fn file(&self) -> Option<&str> {
        self.location.as_ref()?.file.as_deref()
    }
    /// The line (1-based) of the setting in the TOML text, when it came
    /// from one.
    pub fn line(&self) -> Option<usize> {
        self.location.as_ref().map(|l| l.line)
    }
    /// The column (1-based, in characters) of the setting in the TOML text.
    pub fn column(&self) -> Option<usize> {
        self.location.as_ref().map(|l| l.column)
    }
    /// The TOML table the setting is in, e.g. `breakers.payments`, when it
    /// came from a file and was inside one.
    pub fn table(&self) -> Option<&str> {
        self.location.as_ref()?.table.as_deref()
    }
}

/// `resilience.toml:12:1: [breakers.payments] breaker `payments`:
/// `failure_rate_threshold` = 150: must be in (0, 100]`, with what is not
/// known left out.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(location) = &self.location {
            match &location.file {
                Some(file) => write!(f, "{file}:{}:{}: ", location.line, location.column)?,
                None => write!(f, "line {}, column {}: ", location.line, location.column)?,
            }
            if let Some(table) = &location.table {
                write!(f, "[{table}] ")?;
            }
        }
        let in_table = self.location.as_ref().is_some_and(|l| l.table.is_some());
        match &self.name {
            Some(name) => write!(f, "{} `{}`: ", self.section, name)?,
            // `[registry] `unknown_names` = …`: the table says it all; and a
            // file's problem outside any part (an unknown section, a table
            // written twice) is told by its place, not as `registry:`,
            // which reads as the `[registry]` table.
            None if in_table || self.location.is_some() => {}
            None => write!(f, "{}: ", self.section)?,
        }
        if !self.key.is_empty() {
            write!(f, "`{}` = {}: ", self.key, self.value)?;
        }
        f.write_str(&self.reason)
    }
}

/// A configuration was refused. Lists every problem found, not just the first.
///
/// `Debug` prints the same lines as `Display`, so that a `ConfigError`
/// returned from `main` (which Rust prints with `Debug`) reads as a list of
/// problems, not as a struct dump. The problems themselves are in
/// [`problems`](ConfigError::problems).
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<Problem>,
}

impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl ConfigError {
    /// Refuses a part made by hand (`Breaker::new` and the others) whose
    /// name or configuration a registry would refuse: `problems` are the
    /// configuration's, and a name no attribute could use (see
    /// [`check_name`]) comes first.
    pub(crate) fn of_part(
        section: &'static str,
        name: &str,
        mut problems: Vec<Problem>,
    ) -> Result<(), Self> {
        if let Err(reason) = check_name(name) {
            problems.insert(0, Problem::part(section, name, reason));
        }
        Self::from_problems(problems)
    }

    pub(crate) fn from_problems(problems: Vec<Problem>) -> Result<(), Self> {
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Self { problems })
        }
    }

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

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    const KEYS: &[&str] = &[
        "breakers",
        "budgets",
        "bulkheads",
        "slow_call_duration_threshold_ms",
        "k",
        "window_ms",
    ];

    #[test]
    fn suggests_a_near_name_and_nothing_for_a_far_one() {
        assert_eq!(did_you_mean("breaker", KEYS), "did you mean `breakers`? ");
        assert_eq!(did_you_mean("Budgets", KEYS), "did you mean `budgets`? ");
        assert_eq!(
            did_you_mean("slow_call_duration_threshold", KEYS),
            "did you mean `slow_call_duration_threshold_ms`? "
        );
        assert_eq!(did_you_mean("throttles", KEYS), "");
        assert_eq!(did_you_mean("", KEYS), "");
        assert_eq!(did_you_mean("b", KEYS), "");
        // Short accepted names are not every short or k-initial name's match.
        assert_eq!(did_you_mean("kind", KEYS), "");
        assert_eq!(did_you_mean("x", KEYS), "");
        assert_eq!(did_you_mean("K", KEYS), "did you mean `k`? ");
        assert_eq!(did_you_mean("window", KEYS), "did you mean `window_ms`? ");
        assert_eq!(
            did_you_mean("breakers", KEYS),
            "",
            "an accepted name is not misspelt"
        );
    }

    proptest::proptest! {
        /// Any text (non-ASCII, empty, long) gets a suggestion from the
        /// list or none, and never panics.
        #[test]
        fn any_name_gets_an_accepted_name_or_nothing(given in "\\PC{0,40}") {
            let said = did_you_mean(&given, KEYS);
            proptest::prop_assert!(
                said.is_empty() || KEYS.iter().any(|k| said == format!("did you mean `{k}`? ")),
                "{said:?}"
            );
        }
    }
}
