//! Breaker settings: defaults, refusals (from files and from the builder),
//! and a full configuration read back.

use std::time::Duration;

use resilient::{Breaker, BreakerConfig, ConfigError, SlidingWindow, State};

const ACCEPTED_KEYS: &[&str] = &[
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

/// Reads `text` as breaker `payments`, expecting exactly one problem, with
/// `key` and `value`; returns the whole error text.
fn refused_file(text: &str, key: &str, value: &str) -> String {
    let err = BreakerConfig::from_toml("payments", text).expect_err(text);
    assert_one_problem(&err, key, value)
}

/// A key written twice in one part's text is named, with the value of the
/// repeat (not the parser's bare "duplicate key").
#[test]
fn a_key_written_twice_is_named() {
    let shown = refused_file(
        "failure_rate_threshold = 50\nfailure_rate_threshold = 60\n",
        "failure_rate_threshold",
        "60",
    );
    assert!(shown.contains("set more than once"), "{shown}");
}

fn refused_builder(config: BreakerConfig, key: &str, value: &str) -> String {
    let err = Breaker::new("payments", config).expect_err("refused");
    assert_one_problem(&err, key, value)
}

fn assert_one_problem(err: &ConfigError, key: &str, value: &str) -> String {
    let text = err.to_string();
    assert_eq!(err.problems().len(), 1, "{text}");
    let p = &err.problems()[0];
    assert_eq!(
        (p.section(), p.name(), p.key(), p.value()),
        ("breaker", Some("payments"), key, value),
        "{text}"
    );
    let expected_head = format!("breaker `payments`: `{key}` = {value}: ");
    assert!(
        text.contains(&expected_head),
        "`{text}` should contain `{expected_head}`"
    );
    text
}

#[test]
fn defaults_are_resilience4j_defaults() {
    let expected = BreakerConfig::default()
        .failure_rate_threshold(50.0)
        .slow_call_rate_threshold(100.0)
        .slow_call_duration_threshold(Duration::from_secs(60))
        .permitted_number_of_calls_in_half_open_state(10)
        .sliding_window(SlidingWindow::CountBased { size: 100 })
        .minimum_number_of_calls(100)
        .wait_duration_in_open_state(Duration::from_secs(60))
        .honor_retry_after(true)
        .initial_state(State::Closed);
    assert_eq!(BreakerConfig::default(), expected);
    assert_eq!(
        BreakerConfig::from_toml("payments", "").unwrap(),
        expected,
        "missing keys take the defaults"
    );
    assert!(Breaker::new("payments", BreakerConfig::default()).is_ok());
}

#[test]
fn a_full_config_is_read_into_the_right_values() {
    let text = r#"
        failure_rate_threshold = 25.5
        slow_call_rate_threshold = 80
        slow_call_duration_threshold_ms = 1500
        permitted_number_of_calls_in_half_open_state = 3
        sliding_window_type = "time_based"
        sliding_window_size = 30
        minimum_number_of_calls = 200
        wait_duration_in_open_state_ms = 2500
        honor_retry_after = false
        initial_state = "metrics_only"
    "#;
    let expected = BreakerConfig::default()
        .failure_rate_threshold(25.5)
        .slow_call_rate_threshold(80.0)
        .slow_call_duration_threshold(Duration::from_millis(1500))
        .permitted_number_of_calls_in_half_open_state(3)
        .sliding_window(SlidingWindow::TimeBased { seconds: 30 })
        .minimum_number_of_calls(200)
        .wait_duration_in_open_state(Duration::from_millis(2500))
        .honor_retry_after(false)
        .initial_state(State::MetricsOnly);
    assert_eq!(
        BreakerConfig::from_toml("payments", text).unwrap(),
        expected
    );
    // The serde path reads the same table into the same values, in any order.
    assert_eq!(toml::from_str::<BreakerConfig>(text).unwrap(), expected);
    let breaker = Breaker::new("payments", expected.clone()).unwrap();
    assert_eq!(breaker.config(), &expected);
    assert_eq!(breaker.state(), State::MetricsOnly);
    // The window type and size may come in either order.
    let reordered = "sliding_window_size = 30\nsliding_window_type = \"time_based\"\nminimum_number_of_calls = 5";
    assert_eq!(
        BreakerConfig::from_toml("payments", reordered).unwrap(),
        BreakerConfig::default()
            .sliding_window(SlidingWindow::TimeBased { seconds: 30 })
            .minimum_number_of_calls(5)
    );
}

#[test]
fn rates_outside_0_to_100_are_refused() {
    for (text, key, value) in [
        (
            "failure_rate_threshold = 150",
            "failure_rate_threshold",
            "150",
        ),
        ("failure_rate_threshold = 0", "failure_rate_threshold", "0"),
        (
            "failure_rate_threshold = -5.5",
            "failure_rate_threshold",
            "-5.5",
        ),
        (
            "slow_call_rate_threshold = 100.5",
            "slow_call_rate_threshold",
            "100.5",
        ),
        // As written (review 22: shown as `NaN`, and `1e300` as 301 digits).
        (
            "slow_call_rate_threshold = nan",
            "slow_call_rate_threshold",
            "nan",
        ),
        (
            "failure_rate_threshold = 1e300",
            "failure_rate_threshold",
            "1e300",
        ),
        (
            "failure_rate_threshold = +inf # no limit",
            "failure_rate_threshold",
            "+inf",
        ),
    ] {
        let msg = refused_file(text, key, value);
        assert!(
            msg.contains("percentage greater than 0 and at most 100"),
            "{msg}"
        );
    }
    let msg = refused_builder(
        BreakerConfig::default().failure_rate_threshold(150.0),
        "failure_rate_threshold",
        "150",
    );
    assert!(msg.contains("at most 100"), "{msg}");
    refused_builder(
        BreakerConfig::default().slow_call_rate_threshold(0.0),
        "slow_call_rate_threshold",
        "0",
    );
    // The bounds themselves: 100 is accepted.
    assert!(BreakerConfig::from_toml("payments", "failure_rate_threshold = 100").is_ok());
}

#[test]
fn zero_counts_are_refused() {
    for key in [
        "sliding_window_size",
        "minimum_number_of_calls",
        "permitted_number_of_calls_in_half_open_state",
    ] {
        let msg = refused_file(&format!("{key} = 0"), key, "0");
        assert!(
            msg.contains("greater than 0") || msg.contains("from 1"),
            "{msg}"
        );
    }
    refused_builder(
        BreakerConfig::default().sliding_window(SlidingWindow::CountBased { size: 0 }),
        "sliding_window_size",
        "0",
    );
    refused_builder(
        BreakerConfig::default()
            .sliding_window(SlidingWindow::TimeBased { seconds: 0 })
            .minimum_number_of_calls(1),
        "sliding_window_size",
        "0",
    );
    refused_builder(
        BreakerConfig::default().minimum_number_of_calls(0),
        "minimum_number_of_calls",
        "0",
    );
    refused_builder(
        BreakerConfig::default().permitted_number_of_calls_in_half_open_state(0),
        "permitted_number_of_calls_in_half_open_state",
        "0",
    );
}

/// A time-based window counts at most 16 383 calls a second: a minimum
/// above what it can hold was accepted, and the breaker could never open.
#[test]
fn a_minimum_a_time_based_window_cannot_hold_is_refused() {
    let msg = refused_file(
        "sliding_window_type = \"time_based\"\nsliding_window_size = 2\nminimum_number_of_calls = 40000",
        "minimum_number_of_calls",
        "40000",
    );
    assert!(msg.contains("32766") && msg.contains("16383"), "{msg}");
    let at_most = BreakerConfig::default()
        .sliding_window(SlidingWindow::TimeBased { seconds: 2 })
        .minimum_number_of_calls(32_766);
    assert!(Breaker::new("payments", at_most).is_ok());
}

#[test]
fn negative_counts_are_refused() {
    let msg = refused_file("sliding_window_size = -3", "sliding_window_size", "-3");
    assert!(msg.contains("must not be negative"), "{msg}");
}

#[test]
fn negative_durations_are_refused_with_our_own_message() {
    for key in [
        "wait_duration_in_open_state_ms",
        "slow_call_duration_threshold_ms",
    ] {
        let msg = refused_file(&format!("{key} = -5"), key, "-5");
        assert!(msg.contains("must not be negative"), "{msg}");
    }
    let err = toml::from_str::<BreakerConfig>("wait_duration_in_open_state_ms = -5").unwrap_err();
    assert!(
        err.to_string()
            .contains("`wait_duration_in_open_state_ms` = -5: must not be negative"),
        "{err}"
    );
}

#[test]
fn zero_durations_are_refused() {
    for key in [
        "wait_duration_in_open_state_ms",
        "slow_call_duration_threshold_ms",
    ] {
        let msg = refused_file(&format!("{key} = 0"), key, "0");
        assert!(msg.contains("greater than 0 ms"), "{msg}");
    }
    refused_builder(
        BreakerConfig::default().wait_duration_in_open_state(Duration::ZERO),
        "wait_duration_in_open_state_ms",
        "0",
    );
    refused_builder(
        BreakerConfig::default().slow_call_duration_threshold(Duration::ZERO),
        "slow_call_duration_threshold_ms",
        "0",
    );
}

#[test]
fn fractional_durations_are_refused() {
    let msg = refused_file(
        "wait_duration_in_open_state_ms = 1.5",
        "wait_duration_in_open_state_ms",
        "1.5",
    );
    assert!(msg.contains("whole milliseconds"), "{msg}");
}

#[test]
fn minimum_calls_beyond_a_count_window_are_refused() {
    let msg = refused_file(
        "sliding_window_size = 10\nminimum_number_of_calls = 20",
        "minimum_number_of_calls",
        "20",
    );
    assert!(msg.contains("`sliding_window_size` (10)"), "{msg}");
    refused_builder(
        BreakerConfig::default()
            .sliding_window(SlidingWindow::CountBased { size: 10 })
            .minimum_number_of_calls(20),
        "minimum_number_of_calls",
        "20",
    );
    // A window under the default minimum, the minimum not written: the
    // message says the value is the default, and what to set.
    let msg = refused_file("sliding_window_size = 60", "minimum_number_of_calls", "100");
    assert!(msg.contains("100 is its default"), "{msg}");
    assert!(
        !refused_file(
            "sliding_window_size = 10\nminimum_number_of_calls = 20",
            "minimum_number_of_calls",
            "20",
        )
        .contains("default"),
    );
    // A time-based window may hold any number of calls.
    assert!(
        BreakerConfig::from_toml(
            "payments",
            "sliding_window_type = \"time_based\"\nsliding_window_size = 10\nminimum_number_of_calls = 20"
        )
        .is_ok()
    );
}

#[test]
fn oversized_windows_and_probe_counts_are_refused() {
    refused_file(
        "sliding_window_size = 2000000\nminimum_number_of_calls = 1",
        "sliding_window_size",
        "2000000",
    );
    refused_file(
        "sliding_window_type = \"time_based\"\nsliding_window_size = 100000",
        "sliding_window_size",
        "100000",
    );
    refused_builder(
        BreakerConfig::default().permitted_number_of_calls_in_half_open_state(2_000_000),
        "permitted_number_of_calls_in_half_open_state",
        "2000000",
    );
}

#[test]
fn unknown_keys_are_refused_listing_the_accepted_ones() {
    let msg = refused_file("failure_threshold = 50", "failure_threshold", "50");
    assert!(msg.contains("unknown key"), "{msg}");
    for key in ACCEPTED_KEYS {
        assert!(
            msg.contains(&format!("`{key}`")),
            "{msg} should list `{key}`"
        );
    }
    let err = toml::from_str::<BreakerConfig>("failure_threshold = 50")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`failure_threshold` = 50: unknown key"),
        "{err}"
    );
    assert!(err.contains("`minimum_number_of_calls`"), "{err}");
}

#[test]
fn misspelt_initial_state_is_refused_listing_the_accepted_ones() {
    let msg = refused_file("initial_state = \"clsed\"", "initial_state", "\"clsed\"");
    assert!(
        msg.contains("`closed`, `disabled`, `forced_open`, `metrics_only`"),
        "{msg}"
    );
    // Open and half-open are reached by the breaker itself, not configured.
    refused_file(
        "initial_state = \"half_open\"",
        "initial_state",
        "\"half_open\"",
    );
    let msg = refused_builder(
        BreakerConfig::default().initial_state(State::Open),
        "initial_state",
        "\"open\"",
    );
    assert!(
        msg.contains("`closed`, `disabled`, `forced_open`, `metrics_only`"),
        "{msg}"
    );
    let err = serde_json::from_str::<BreakerConfig>(r#"{"initial_state": "clsed"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`initial_state` = \"clsed\": expected one of `closed`"),
        "{err}"
    );
}

#[test]
fn misspelt_window_type_is_refused_listing_the_accepted_ones() {
    let msg = refused_file(
        "sliding_window_type = \"count-based\"",
        "sliding_window_type",
        "\"count-based\"",
    );
    assert!(msg.contains("`count_based`, `time_based`"), "{msg}");
}

#[test]
fn values_of_the_wrong_kind_are_refused() {
    let msg = refused_file(
        "failure_rate_threshold = \"high\"",
        "failure_rate_threshold",
        "\"high\"",
    );
    assert!(
        msg.contains("expected a percentage, found a string"),
        "{msg}"
    );
    let msg = refused_file("honor_retry_after = 1", "honor_retry_after", "1");
    assert!(msg.contains("expected `true` or `false`"), "{msg}");
    let msg = refused_file(
        "minimum_number_of_calls = [1, 2]",
        "minimum_number_of_calls",
        "[1, 2]",
    );
    assert!(msg.contains("found an array"), "{msg}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let err = BreakerConfig::from_toml(
        "payments",
        "failure_rate_threshold = 0\nsliding_window_size = 0\nwait_duration_in_open_state_ms = -1\nbogus = true",
    )
    .unwrap_err();
    let mut keys: Vec<&str> = err.problems().iter().map(|p| p.key()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "bogus",
            "failure_rate_threshold",
            "sliding_window_size",
            "wait_duration_in_open_state_ms"
        ],
        "{err}"
    );
    let err = Breaker::new(
        "payments",
        BreakerConfig::default()
            .failure_rate_threshold(0.0)
            .minimum_number_of_calls(0),
    )
    .unwrap_err();
    assert_eq!(err.problems().len(), 2, "{err}");
}

#[test]
fn text_that_is_not_a_toml_table_is_refused_naming_the_breaker() {
    let err = BreakerConfig::from_toml("payments", "failure_rate_threshold = = 5").unwrap_err();
    let p = &err.problems()[0];
    assert_eq!((p.section(), p.name()), ("breaker", Some("payments")));
    assert!(
        err.to_string()
            .starts_with("invalid resilience configuration\n  breaker `payments`: "),
        "{err}"
    );
}

#[test]
fn duplicate_keys_are_refused_by_the_serde_path() {
    let err = serde_json::from_str::<BreakerConfig>(
        r#"{"minimum_number_of_calls": 5, "minimum_number_of_calls": 6}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`minimum_number_of_calls` set more than once"),
        "{err}"
    );
}

#[test]
fn an_open_wait_or_a_slow_call_threshold_longer_than_a_day_is_refused_not_clamped() {
    let day_ms = 24 * 60 * 60 * 1000u64;
    for key in [
        "wait_duration_in_open_state_ms",
        "slow_call_duration_threshold_ms",
    ] {
        let msg = refused_file(
            &format!("{key} = {}", day_ms + 1),
            key,
            &(day_ms + 1).to_string(),
        );
        assert!(msg.contains("at most 86400000 ms"), "{msg}");
        // A day exactly is accepted.
        BreakerConfig::from_toml("payments", &format!("{key} = {day_ms}"))
            .expect("one day is accepted");
    }
    refused_builder(
        BreakerConfig::default().wait_duration_in_open_state(Duration::MAX),
        "wait_duration_in_open_state_ms",
        &format!("{}.999999", Duration::MAX.as_millis()),
    );
    // Before, a threshold too far to add to the clock meant no call was
    // ever slow, silently.
    refused_builder(
        BreakerConfig::default().slow_call_duration_threshold(Duration::MAX),
        "slow_call_duration_threshold_ms",
        &format!("{}.999999", Duration::MAX.as_millis()),
    );
}

#[test]
fn counts_too_large_for_any_setting_are_refused_with_the_keys_own_range() {
    let big = "5000000000";
    let msg = refused_file(
        &format!("permitted_number_of_calls_in_half_open_state = {big}"),
        "permitted_number_of_calls_in_half_open_state",
        big,
    );
    assert!(msg.contains("from 1 to 1048575"), "{msg}");
    assert!(!msg.contains("4294967295"), "{msg}");
    let msg = refused_file(
        &format!("sliding_window_size = {big}"),
        "sliding_window_size",
        big,
    );
    assert!(
        msg.contains("1000000 calls") && msg.contains("86400 seconds"),
        "{msg}"
    );
    let msg = refused_file(
        &format!("minimum_number_of_calls = {big}"),
        "minimum_number_of_calls",
        big,
    );
    assert!(
        msg.contains("4294967295") && msg.contains("count-based"),
        "{msg}"
    );
}

#[test]
fn an_open_wait_a_nanosecond_over_a_day_is_shown_exactly() {
    let wait = Duration::from_secs(86_400) + Duration::from_nanos(1);
    let err = Breaker::new(
        "payments",
        BreakerConfig::default().wait_duration_in_open_state(wait),
    )
    .expect_err("over a day");
    let text = err.to_string();
    assert!(!text.contains("= 86400000:"), "{text}");
    assert!(text.contains("86400000.000001"), "{text}");
}

/// A value that could not be read is one problem: the checks that relate
/// it to other keys are not run against the default it left in its place
/// (which the user never wrote).
#[test]
fn an_unreadable_value_is_not_also_checked_as_its_default() {
    let cases = [
        // The default minimum (100) is larger than this window.
        "sliding_window_size = 10\nminimum_number_of_calls = 99999999999",
        // This minimum is larger than the default window (100).
        "sliding_window_size = 99999999999\nminimum_number_of_calls = 150",
        // The default `honor_retry_after` would be fine; a wrong type is
        // still one problem.
        "honor_retry_after = \"yes\"\nopen_on_retry_after = true",
    ];
    for text in cases {
        let err = BreakerConfig::from_toml("payments", text).expect_err(text);
        assert_eq!(err.problems().len(), 1, "{text}: {err}");
        let unreadable = text
            .lines()
            .find(|l| l.contains("99999999999") || l.contains("\"yes\""));
        let key = unreadable.unwrap().split(" =").next().unwrap();
        assert_eq!(err.problems()[0].key(), key, "{text}: {err}");
    }
    // A problem of a key that was read is still reported with it.
    let text = "sliding_window_size = 99999999999\nfailure_rate_threshold = 150";
    let err = BreakerConfig::from_toml("payments", text).expect_err(text);
    assert_eq!(err.problems().len(), 2, "{text}: {err}");
    // The same in a registry's file.
    let file =
        "[breakers.payments]\nsliding_window_size = 10\nminimum_number_of_calls = 99999999999";
    let err = match resilient::Registry::builder().toml(file) {
        Ok(builder) => builder.build().expect_err(file),
        Err(err) => err,
    };
    assert_eq!(err.problems().len(), 1, "{file}: {err}");
    assert_eq!(err.problems()[0].key(), "minimum_number_of_calls", "{err}");
}
