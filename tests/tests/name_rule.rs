//! The attribute and the registry accept exactly the same names for
//! breakers, budgets and bulkheads: a name the registry accepts but no
//! attribute can use configures nothing, silently.
//!
//! The macro crate cannot share code with the runtime (the runtime depends
//! on it), so each keeps the rule; this test includes the attribute's own
//! rule (`macros/src/name.rs`, the function the attribute calls) and checks
//! the registry's against it.

#[allow(dead_code, unreachable_pub)]
#[path = "../../macros/src/name.rs"]
mod attribute;

use proptest::prelude::*;
use resilient::{BreakerConfig, BudgetConfig, BulkheadConfig, Registry};

fn registry_accepts(name: &str) -> bool {
    let breaker = Registry::builder()
        .breaker(name, BreakerConfig::default())
        .build()
        .is_ok();
    let budget = Registry::builder()
        .budget(name, BudgetConfig::default())
        .build()
        .is_ok();
    let bulkhead = Registry::builder()
        .bulkhead(name, BulkheadConfig::default())
        .build()
        .is_ok();
    assert!(breaker == budget && budget == bulkhead, "{name:?}");
    // A part made by hand takes the same names (helper audit, 2026-11-27:
    // `Breaker::new("pay ments", …)` and the others accepted any).
    let by_hand = [
        resilient::Breaker::new(name, BreakerConfig::default()).is_ok(),
        resilient::Bulkhead::new(name, BulkheadConfig::default()).is_ok(),
        resilient::RetryBudget::new(name, BudgetConfig::default()).is_ok(),
        resilient::AdaptiveThrottle::new(name, resilient::ThrottleConfig::default()).is_ok(),
    ];
    assert!(
        by_hand.iter().all(|&ok| ok == breaker),
        "{name:?}: {by_hand:?}"
    );
    breaker
}

/// The same name in a file: quoted, so any text can be a TOML key.
fn file_accepts(name: &str) -> bool {
    let mut quoted = String::from("\"");
    for c in name.chars() {
        match c {
            '"' | '\\' => quoted.extend(['\\', c]),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    Registry::builder()
        .toml(&format!("[breakers.{quoted}]\n"))
        .expect("valid TOML")
        .build()
        .is_ok()
}

#[test]
fn the_edges_of_the_rule() {
    for (name, valid) in [
        ("payments", true),
        ("payments-eu.v2_b", true),
        ("0", true),
        ("", false),
        (" payments", false),
        ("payments ", false),
        ("pay ments", false),
        ("pay\tments", false),
        ("pay/ments", false),
        ("paymënts", false),
        ("pay:ments", false),
    ] {
        assert_eq!(attribute::is_valid_name(name), valid, "attribute: {name:?}");
        assert_eq!(registry_accepts(name), valid, "registry: {name:?}");
        assert_eq!(file_accepts(name), valid, "file: {name:?}");
    }
}

proptest! {
    #[test]
    fn the_registry_and_the_attribute_agree(name in "[a-zA-Z0-9_.\\- /:é\t\"']{0,6}") {
        let attribute = attribute::is_valid_name(&name);
        prop_assert_eq!(registry_accepts(&name), attribute, "{:?}", name);
        prop_assert_eq!(file_accepts(&name), attribute, "{:?}", name);
    }

    #[test]
    fn any_text_agrees(name in "\\PC{0,8}") {
        prop_assert_eq!(registry_accepts(&name), attribute::is_valid_name(&name), "{:?}", name);
    }
}
