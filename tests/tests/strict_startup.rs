//! A strict registry is checked at start-up against every name the
//! program's annotated functions use: deleting `[breakers.fraud]` from the
//! file used to pass `install()` and then fail every call to the functions
//! naming it. Its own test binary, since `install` is process-wide and the
//! names checked are those of the functions linked into this binary.

use resilient::{BreakerConfig, BudgetConfig, BulkheadConfig, Registry, resilient};

#[resilient(breaker = "ledger")]
async fn post_entry() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(breaker = "fraud")]
async fn score_order() -> Result<u32, std::io::Error> {
    Ok(1)
}

#[resilient(breaker = "fraud", bulkhead = "fraud-pool")]
async fn score_refund() -> Result<u32, std::io::Error> {
    Ok(2)
}

#[resilient(breaker = "ledger", budget = "ledger-retries", retries = 2, idempotent)]
async fn read_balance() -> Result<u64, std::io::Error> {
    Ok(3)
}

/// Everything the functions above name, except what `lacking` leaves out.
fn registry(strict: bool, lacking: &[&str]) -> Registry {
    let mut builder = Registry::builder().strict(strict);
    for name in ["ledger", "fraud"] {
        if !lacking.contains(&name) {
            builder = builder.breaker(name, BreakerConfig::default());
        }
    }
    if !lacking.contains(&"ledger-retries") {
        builder = builder.budget("ledger-retries", BudgetConfig::default());
    }
    if !lacking.contains(&"fraud-pool") {
        builder = builder.bulkhead("fraud-pool", BulkheadConfig::default());
    }
    builder.build().unwrap()
}

/// A name missing next to a configured one a letter off (a file's
/// `[breakers.fruad]`) says one of the two is misspelt (helper audit,
/// 2026-11-27: the misspelt table showed only among the unused parts).
#[test]
fn a_missing_name_next_to_a_misspelt_configured_one_is_pointed_out() {
    let err = Registry::builder()
        .strict(true)
        .toml("[breakers.ledger]\n[breakers.fruad]\n[budgets.ledger-retries]\n[bulkheads.fraud-pool]\n")
        .unwrap()
        .build()
        .unwrap()
        .check_names()
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems().len(), 1, "{text}");
    assert!(
        text.contains("breaker `fraud`: not configured")
            && text.contains("`[breakers.fruad]` is configured: is one of the two names misspelt?"),
        "{text}"
    );
}

#[test]
fn check_names_lists_every_missing_name_with_the_functions_using_it() {
    let err = registry(true, &["fraud", "fraud-pool", "ledger-retries"])
        .check_names()
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems().len(), 3, "{text}");
    let fraud = err
        .problems()
        .iter()
        .find(|p| p.section() == "breaker")
        .unwrap();
    assert_eq!(fraud.name(), Some("fraud"));
    assert!(
        fraud.reason().contains("strict_startup::score_order"),
        "{text}"
    );
    assert!(
        fraud.reason().contains("strict_startup::score_refund"),
        "{text}"
    );
    assert!(fraud.reason().contains("strict_startup.rs:"), "{text}");
    assert!(!fraud.reason().contains("post_entry"), "{text}");
    for expected in [
        "bulkhead `fraud-pool`",
        "score_refund",
        "budget `ledger-retries`",
        "read_balance",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // A budget that comes with a breaker's name is never required.
    assert!(!text.contains("budget `ledger`"), "{text}");
    assert!(!text.contains("budget `fraud`"), "{text}");

    registry(true, &[]).check_names().unwrap();
}

#[tokio::test]
async fn a_strict_registry_lacking_a_used_name_is_refused_at_install() {
    let err = registry(true, &["fraud"]).install().unwrap_err();
    let text = format!("{err:?}");
    assert!(text.contains("breaker `fraud`"), "{text}");
    assert!(text.contains("score_order"), "{text}");
    assert!(text.contains("score_refund"), "{text}");
    assert_eq!(err.problems().len(), 1, "{text}");

    // Refused, so not installed: a complete one still can be, and calls
    // then use it.
    registry(true, &[]).install().unwrap();
    assert!(Registry::global().is_strict());
    assert_eq!(score_order().await.unwrap(), 1);
    assert_eq!(score_refund().await.unwrap(), 2);
    post_entry().await.unwrap();
    assert_eq!(read_balance().await.unwrap(), 3);

    let late = registry(true, &[]).install().unwrap_err();
    assert!(late.to_string().contains("already in use"), "{late}");
}

#[test]
fn a_lenient_registry_reports_but_does_not_require_names() {
    let lenient = registry(false, &["fraud"]);
    let err = lenient.check_names().unwrap_err();
    assert!(err.to_string().contains("breaker `fraud`"), "{err}");
}

/// A throttle guards the calls of the breaker with its name: one under a
/// name no function's breaker has (a typo) guards nothing, which nothing
/// said (review 8). It is listed, and `install` logs it; a strict registry
/// still installs it (review 9: a throttle used by hand, or configured in a
/// file shared by services, is no mistake).
#[test]
fn a_throttle_no_function_uses_is_listed_but_not_refused() {
    let with_throttle = |name: &str| {
        Registry::builder()
            .strict(true)
            .breaker("ledger", BreakerConfig::default())
            .breaker("fraud", BreakerConfig::default())
            .budget("ledger-retries", BudgetConfig::default())
            .bulkhead("fraud-pool", BulkheadConfig::default())
            .throttle(name, resilient::ThrottleConfig::default())
            .build()
            .unwrap()
    };
    assert!(with_throttle("fraud").unused_throttles().is_empty());
    let typo = with_throttle("fruad");
    assert_eq!(typo.unused_throttles(), ["fruad"]);
    assert!(typo.check_names().is_ok());
}

/// A misspelt part in a lenient registry's file configured nothing, and
/// nothing said so: the function it was meant for ran with the defaults
/// (review 22). Configured parts no function names are listed (and logged
/// by `install`), whatever the registry's strictness.
#[test]
fn parts_no_function_names_are_listed() {
    let file = r#"
[breakers.ledger]
[breakers.fruad]
failure_rate_threshold = 10
[budgets.ledger-retries]
[budgets.ledger-retires]
[bulkheads.fraud-pool]
"#;
    let misspelt = Registry::builder().toml(file).unwrap().build().unwrap();
    assert_eq!(
        misspelt.unused_parts(),
        [("breaker", "fruad"), ("budget", "ledger-retires")]
    );
    assert!(misspelt.check_names().is_err(), "`fraud` is not configured");
    assert!(registry(true, &[]).unused_parts().is_empty());
}
