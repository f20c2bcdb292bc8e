//! The rule for the names of breakers, retry budgets, bulkheads and
//! throttles: non-empty, and only ASCII letters, digits, `_`, `-` and `.`.
//!
//! The attribute refuses any other name at compile time
//! (`macros/src/name.rs` holds the same rule: the macro crate cannot depend
//! on this one). The registry applies it too, to names given in code and in
//! files, so that a name no function could ever use (`"payments "`, an empty
//! table name, `"pay ments"`) is refused at start-up instead of silently
//! configuring nothing. The characters are those of a bare TOML key and
//! `.`, which TOML reads as a separator: a name with one is quoted in a
//! file (`[breakers."fraud.checks"]`).
//! `tests/tests/name_rule.rs` checks that both sides agree.

/// Why `name` cannot name a part, or `Ok` when it can.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("a name must not be empty; {RULE}"));
    }
    match name.char_indices().find(|&(_, c)| !allowed(c)) {
        None => Ok(()),
        Some((at, c)) => {
            let shown = match c {
                ' ' => "a space".to_owned(),
                c if c.is_whitespace() || c.is_control() => format!("{c:?}"),
                c => format!("`{c}`"),
            };
            let position = if at == 0 {
                "at the start".to_owned()
            } else if at + c.len_utf8() == name.len() {
                "at the end".to_owned()
            } else {
                format!("at byte {at}")
            };
            Err(format!(
                "{shown} {position} cannot be used in a name; {RULE}"
            ))
        }
    }
}

/// The rule, as the attribute words it.
const RULE: &str = "names use only ASCII letters, digits, `_`, `-` and `.`, as `#[resilient(breaker = \"…\")]` requires";

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}
