//! The rule for the names of breakers, retry budgets and bulkheads:
//! non-empty, and only ASCII letters, digits, `_`, `-` and `.` (the
//! characters of a bare TOML key, so every name can be configured as
//! `[breakers.name]`).
//!
//! The runtime crate's registry applies the same rule to names given in code
//! and in files (`runtime/src/config/name.rs`; this crate cannot share code
//! with it, since the runtime depends on this one). `tests/tests/name_rule.rs`
//! includes this file and checks that both sides accept exactly the same
//! names.

/// Can `name` name a breaker, budget or bulkhead?
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
