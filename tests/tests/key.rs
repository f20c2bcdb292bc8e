//! Idempotency keys: stable ids validated for use as a header value, random
//! keys unique and unaffected by seeding the jitter generator.

use std::collections::HashSet;

use proptest::prelude::*;
use resilient::IdempotencyKey;

#[test]
fn random_keys_are_version_4_uuids_and_unique() {
    let keys: HashSet<String> = (0..10_000)
        .map(|_| IdempotencyKey::random().to_string())
        .collect();
    assert_eq!(keys.len(), 10_000);
    for k in keys.iter().take(100) {
        let parts: Vec<_> = k.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12], "{k}");
        assert_eq!(&k[14..15], "4", "{k}");
        assert!("89ab".contains(&k[19..20]), "{k}");
    }
}

#[test]
fn seeding_jitter_does_not_repeat_random_keys() {
    resilient::seed_jitter(1);
    let a = IdempotencyKey::random();
    resilient::seed_jitter(1);
    let b = IdempotencyKey::random();
    assert_ne!(a, b);
}

#[test]
fn stable_ids_are_kept_as_given() {
    let key = IdempotencyKey::from_stable_id("order-8812").unwrap();
    assert_eq!(key.as_str(), "order-8812");
    assert_eq!(key.to_string(), "order-8812");
    assert_eq!(key.clone(), key);
}

#[test]
fn unusable_stable_ids_are_refused() {
    for bad in [
        "",
        "has space",
        "quote\"",
        "back\\slash",
        "tab\t",
        "ünïcode",
        &"x".repeat(256),
    ] {
        let err = IdempotencyKey::from_stable_id(bad).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid idempotency key: "),
            "{err}"
        );
    }
    assert!(IdempotencyKey::from_stable_id("x".repeat(255)).is_ok());
}

proptest! {
    #[test]
    fn any_accepted_id_is_a_valid_header_value(s in "\\PC{0,300}") {
        if let Ok(key) = IdempotencyKey::from_stable_id(&s) {
            prop_assert!(!key.as_str().is_empty() && key.as_str().len() <= 255);
            prop_assert!(key.as_str().bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\'));
            prop_assert_eq!(key.as_str(), s.as_str());
        }
    }

    /// Whatever a header holds, reading it never panics, and a key read
    /// from it is one `from_stable_id` accepts.
    #[test]
    fn any_header_value_reads_as_a_valid_key_or_an_error(s in "\\PC{0,300}") {
        if let Ok(key) = IdempotencyKey::from_header_value(&s) {
            prop_assert!(IdempotencyKey::from_stable_id(key.as_str()).is_ok());
        }
    }

    /// A key reads back as itself, bare or as a structured-field string
    /// (RFC 8941 §3.3.3), with whitespace around: the same key either way.
    #[test]
    fn a_key_reads_the_same_bare_or_quoted(
        s in "[!#-\\[\\]-~]{1,255}",
        pad_l in "[ \t]{0,2}",
        pad_r in "[ \t]{0,2}",
    ) {
        let key = IdempotencyKey::from_stable_id(&s).unwrap();
        let bare = IdempotencyKey::from_header_value(&format!("{pad_l}{s}{pad_r}")).unwrap();
        let quoted = IdempotencyKey::from_header_value(&format!("{pad_l}\"{s}\"{pad_r}")).unwrap();
        prop_assert_eq!(&bare, &key);
        prop_assert_eq!(&quoted, &key);
    }
}

/// The IETF draft's own example, and what a structured-field string may
/// hold that a key may not (a space, escaped quotes and backslashes), or
/// what is not one (unclosed, an unknown escape, parameters after it).
#[test]
fn header_values_are_read_bare_or_as_the_drafts_quoted_strings() {
    let drafts = "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"";
    assert_eq!(
        IdempotencyKey::from_header_value(drafts).unwrap().as_str(),
        "8e03978e-40d5-43e8-bc93-6894a57f9324"
    );
    for bad in [
        "",
        "\"\"",
        "\"with space\"",
        "\"esc\\\"aped\"",
        "\"back\\\\slash\"",
        "\"unclosed",
        "\"bad\\escape\"",
        "\"key\";param=1",
        "\"key\" trailing",
        "bare with space",
    ] {
        let err = IdempotencyKey::from_header_value(bad).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid idempotency key: "),
            "{bad}: {err}"
        );
    }
}
