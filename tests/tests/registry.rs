//! Named breakers through the attribute: shared per dependency, configured
//! in a registry (in code or from TOML), one registry per test.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::{
    BreakerConfig, BreakerEvent, Classification, Classify, ErrorKind, Registry, SlidingWindow,
    State, resilient,
};

#[derive(Debug)]
enum E {
    Down,
    BadRequest,
    Busy(Duration),
    Resilience(resilient::Error),
}

impl From<resilient::Error> for E {
    fn from(e: resilient::Error) -> Self {
        E::Resilience(e)
    }
}

impl Classify for E {
    fn classify(&self) -> Classification {
        match self {
            E::Down => Classification::Transient,
            E::BadRequest => Classification::Permanent,
            E::Busy(d) => Classification::Throttled {
                retry_after: Some(*d),
            },
            E::Resilience(e) => e.classify(),
        }
    }
}

impl E {
    fn refusal(&self) -> Option<ErrorKind> {
        match self {
            E::Resilience(e) => Some(e.kind()),
            _ => None,
        }
    }
}

/// A dependency that answers with what it is told to, and counts calls.
#[derive(Default)]
struct Dep {
    calls: AtomicU32,
    next: Mutex<Vec<Result<(), E>>>,
}

impl Dep {
    fn script(outcomes: Vec<Result<(), E>>) -> Self {
        Dep {
            calls: AtomicU32::new(0),
            next: Mutex::new(outcomes.into_iter().rev().collect()),
        }
    }

    async fn call(&self) -> Result<(), E> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        self.next.lock().unwrap().pop().unwrap_or(Ok(()))
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

fn window_of_four(threshold: f64) -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size: 4 })
        .minimum_number_of_calls(4)
        .failure_rate_threshold(threshold)
        .wait_duration_in_open_state(Duration::from_secs(10))
        .permitted_number_of_calls_in_half_open_state(1)
}

fn registry(config: BreakerConfig) -> Registry {
    Registry::builder()
        .breaker("payments", config)
        .build()
        .unwrap()
}

#[resilient(breaker = "payments")]
async fn pay(dep: &Dep) -> Result<(), E> {
    dep.call().await
}

#[resilient(breaker = "payments")]
async fn refund(dep: &Dep) -> Result<(), E> {
    dep.call().await
}

#[resilient(breaker = "payments", retries = 3, idempotent, base_ms = 10)]
async fn pay_with_retries(dep: &Dep) -> Result<(), E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn four_failures_open_the_breaker_and_the_fifth_call_does_not_run() {
    let reg = registry(window_of_four(75.0));
    reg.scope(async {
        let dep = Dep::script((0..4).map(|_| Err(E::Down)).collect());
        for _ in 0..4 {
            assert!(matches!(pay(&dep).await, Err(E::Down)));
        }
        assert_eq!(reg.breaker("payments").unwrap().state(), State::Open);
        let fifth = pay(&dep).await.unwrap_err();
        assert_eq!(fifth.refusal(), Some(ErrorKind::BreakerOpen));
        assert_eq!(dep.calls(), 4, "an open breaker makes no call");
        match fifth {
            E::Resilience(e) => {
                assert_eq!(e.name(), Some("payments"));
                assert_eq!(e.retry_in(), Some(Duration::from_secs(10)));
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn functions_naming_one_breaker_share_it() {
    let reg = registry(window_of_four(50.0));
    reg.scope(async {
        let dep = Dep::script(vec![Ok(()), Err(E::Down), Err(E::Down), Ok(())]);
        let _ = pay(&dep).await;
        let _ = refund(&dep).await;
        let _ = pay(&dep).await;
        let _ = refund(&dep).await;
        // S F F S at 50 %: open on the fourth outcome, for both functions.
        assert_eq!(
            pay(&dep).await.unwrap_err().refusal(),
            Some(ErrorKind::BreakerOpen)
        );
        assert_eq!(
            refund(&dep).await.unwrap_err().refusal(),
            Some(ErrorKind::BreakerOpen)
        );
        assert_eq!(dep.calls(), 4);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_retry_loop_stops_at_an_open_breaker() {
    let reg = registry(window_of_four(50.0).minimum_number_of_calls(2));
    reg.scope(async {
        let dep = Dep::script((0..10).map(|_| Err(E::Down)).collect());
        let err = pay_with_retries(&dep).await.unwrap_err();
        // Two failures open the breaker; the third attempt is refused and
        // the loop returns the refusal instead of retrying through it.
        assert_eq!(err.refusal(), Some(ErrorKind::BreakerOpen));
        assert_eq!(dep.calls(), 2);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_never_open_the_breaker() {
    let reg = registry(window_of_four(50.0));
    reg.scope(async {
        let dep = Dep::script((0..20).map(|_| Err(E::BadRequest)).collect());
        for _ in 0..20 {
            assert!(matches!(pay(&dep).await, Err(E::BadRequest)));
        }
        assert_eq!(reg.breaker("payments").unwrap().state(), State::Closed);
        assert_eq!(dep.calls(), 20);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn half_open_probe_closes_the_breaker_after_the_wait() {
    let reg = registry(window_of_four(75.0));
    reg.scope(async {
        let dep = Dep::script((0..4).map(|_| Err(E::Down)).collect());
        for _ in 0..4 {
            let _ = pay(&dep).await;
        }
        tokio::time::advance(Duration::from_secs(10)).await;
        pay(&dep).await.unwrap();
        assert_eq!(reg.breaker("payments").unwrap().state(), State::Closed);
        assert_eq!(dep.calls(), 5);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn with_open_on_retry_after_a_throttled_reply_holds_the_breaker_open_for_every_caller() {
    let reg = registry(window_of_four(75.0).open_on_retry_after(true));
    reg.scope(async {
        let dep = Dep::script(vec![Err(E::Busy(Duration::from_secs(30)))]);
        assert!(matches!(pay(&dep).await, Err(E::Busy(_))));
        let other = refund(&dep).await.unwrap_err();
        assert_eq!(other.refusal(), Some(ErrorKind::BreakerOpen));
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(
            refund(&dep).await.unwrap_err().refusal(),
            Some(ErrorKind::BreakerOpen)
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        refund(&dep).await.unwrap();
        assert_eq!(dep.calls(), 2);
    })
    .await;
}

#[resilient(breaker = "payments")]
async fn hangs(dep: &Dep) -> Result<(), E> {
    dep.call().await?;
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_gives_its_half_open_permit_back() {
    let reg = registry(window_of_four(75.0));
    reg.scope(async {
        let breaker = reg.breaker("payments").unwrap();
        breaker.transition_to(State::HalfOpen);
        let dep = Dep::default();
        // The only probe permit is taken by a call that is then dropped.
        let cancelled = tokio::time::timeout(Duration::from_millis(5), hangs(&dep)).await;
        assert!(cancelled.is_err());
        assert_eq!(breaker.state(), State::HalfOpen);
        // Had the permit leaked, this probe would be refused.
        pay(&dep).await.unwrap();
        assert_eq!(breaker.state(), State::Closed);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn each_test_registry_is_isolated() {
    let a = registry(window_of_four(75.0));
    let b = registry(window_of_four(75.0));
    let dep = Dep::script((0..4).map(|_| Err(E::Down)).collect());
    a.scope(async {
        for _ in 0..4 {
            let _ = pay(&dep).await;
        }
    })
    .await;
    assert_eq!(a.breaker("payments").unwrap().state(), State::Open);
    assert_eq!(b.breaker("payments").unwrap().state(), State::Closed);
    b.scope(async { pay(&dep).await.unwrap() }).await;
}

#[resilient(breaker = "not-configured")]
async fn unknown(dep: &Dep) -> Result<(), E> {
    dep.call().await
}

#[tokio::test]
async fn a_strict_registry_refuses_unknown_names() {
    let strict = Registry::builder().strict(true).build().unwrap();
    let dep = Dep::default();
    let err = strict.scope(unknown(&dep)).await.unwrap_err();
    assert_eq!(err.refusal(), Some(ErrorKind::UnknownName));
    assert_eq!(dep.calls(), 0);

    let lenient = Registry::builder().build().unwrap();
    lenient.scope(unknown(&dep)).await.unwrap();
    let created = lenient.breaker("not-configured").unwrap();
    assert_eq!(created.config(), &BreakerConfig::default());
}

#[tokio::test(start_paused = true)]
async fn subscribers_see_transitions_and_rejections() {
    let reg = registry(window_of_four(75.0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let subscription = reg.subscribe(move |e: &BreakerEvent| sink.lock().unwrap().push(e.clone()));
    reg.scope(async {
        let dep = Dep::script((0..4).map(|_| Err(E::Down)).collect());
        for _ in 0..5 {
            let _ = pay(&dep).await;
        }
    })
    .await;
    assert!(subscription.flush(Duration::from_secs(10)));
    let seen = seen.lock().unwrap();
    assert!(seen.iter().any(|e| matches!(
        e,
        BreakerEvent::StateTransition {
            from: State::Closed,
            to: State::Open,
            ..
        }
    )));
    assert!(
        seen.iter()
            .any(|e| matches!(e, BreakerEvent::CallNotPermitted { .. }))
    );
    assert!(seen.iter().all(|e| e.name() == "payments"));
}

#[tokio::test(start_paused = true)]
async fn snapshot_is_plain_serializable_data() {
    let reg = registry(window_of_four(75.0));
    reg.scope(async {
        let dep = Dep::script(vec![Err(E::Down)]);
        let _ = pay(&dep).await;
        let _ = pay(&dep).await;
    })
    .await;
    let snapshot = reg.snapshot();
    assert_eq!(snapshot.breakers.len(), 1);
    assert_eq!(snapshot.breakers[0].name, "payments");
    assert_eq!(snapshot.breakers[0].buffered_calls, 2);
    assert_eq!(snapshot.breakers[0].failed_calls, 1);
    let json = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(json["breakers"][0]["state"], "closed");
}

#[tokio::test(start_paused = true)]
async fn a_registry_is_configured_from_toml() {
    let reg = Registry::builder()
        .toml(
            r#"
            [registry]
            unknown_names = "error"

            [breakers.payments]
            sliding_window_type = "count_based"
            sliding_window_size = 4
            minimum_number_of_calls = 4
            failure_rate_threshold = 75
            wait_duration_in_open_state_ms = 10000
            "#,
        )
        .unwrap()
        .build()
        .unwrap();
    assert!(reg.is_strict());
    assert_eq!(
        reg.breaker("payments").unwrap().config(),
        &BreakerConfig::default()
            .sliding_window(SlidingWindow::CountBased { size: 4 })
            .minimum_number_of_calls(4)
            .failure_rate_threshold(75.0)
            .wait_duration_in_open_state(Duration::from_secs(10))
    );
    reg.scope(async {
        let dep = Dep::script((0..4).map(|_| Err(E::Down)).collect());
        for _ in 0..4 {
            let _ = pay(&dep).await;
        }
        assert_eq!(
            pay(&dep).await.unwrap_err().refusal(),
            Some(ErrorKind::BreakerOpen)
        );
    })
    .await;
}

#[test]
fn bad_files_are_refused_naming_the_part_the_key_and_the_value() {
    let err = Registry::builder()
        .toml(
            r#"
            [breakers.payments]
            failure_rate_threshold = 150

            [breakers.search]
            sliding_window_size = 0
            wait_duration_in_open_state_ms = -5
            failure_rate = 50

            [breakers.ledger]
            initial_state = "forced-open"

            [registry]
            unknown_names = "maybe"

            [brakers.x]
            "#,
        )
        .unwrap()
        .build()
        .unwrap_err();
    let text = err.to_string();
    for expected in [
        "breaker `payments`",
        "failure_rate_threshold",
        "150",
        "breaker `search`",
        "sliding_window_size",
        "wait_duration_in_open_state_ms",
        "-5",
        "failure_rate",
        "breaker `ledger`",
        "forced-open",
        "unknown_names",
        "maybe",
        "brakers",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(err.problems().len() >= 6, "{text}");
}

#[test]
fn invalid_configuration_in_code_is_refused_at_build() {
    let err = Registry::builder()
        .breaker(
            "payments",
            BreakerConfig::default().failure_rate_threshold(0.0),
        )
        .build()
        .unwrap_err();
    let p = &err.problems()[0];
    assert_eq!(
        (p.section(), p.name(), p.key()),
        ("breaker", Some("payments"), "failure_rate_threshold")
    );
    assert_eq!(p.value(), "0");
}

#[test]
fn a_part_configured_twice_in_code_is_refused_naming_it() {
    let err = Registry::builder()
        .breaker("payments", BreakerConfig::default())
        .breaker(
            "payments",
            BreakerConfig::default().failure_rate_threshold(10.0),
        )
        .bulkhead("db", resilient::BulkheadConfig::default())
        .bulkhead("db", resilient::BulkheadConfig::default())
        .bulkhead("db", resilient::BulkheadConfig::default())
        .breaker("search", BreakerConfig::default())
        .build()
        .unwrap_err();
    let text = err.to_string();
    let parts: Vec<_> = err
        .problems()
        .iter()
        .map(|p| (p.section(), p.name()))
        .collect();
    assert_eq!(
        parts,
        [("breaker", Some("payments")), ("bulkhead", Some("db"))],
        "{text}"
    );
    assert!(text.contains("configured twice in code"), "{text}");
    // Three calls for `db`: still one problem for it.
}

#[test]
fn text_that_is_not_toml_is_refused() {
    let err = Registry::builder()
        .toml("[breakers.payments\n")
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("line 1, column 19: not valid TOML: unclosed table"),
        "{err}"
    );
}

/// A key outside any table is told where it goes: the builder's `strict`
/// written as a key, `[registry]`'s key above its table, a section's name
/// without brackets; not "expected a table (`[strict]`)", which sent the
/// operator to a section that does not exist (helper audit, 2026-11-27).
#[test]
fn a_key_outside_any_table_is_told_where_it_belongs() {
    for (text, expected) in [
        (
            "strict = true\n",
            "line 1, column 1: `strict` = true: a key outside any table; a strict registry is written `unknown_names = \"error\"` under `[registry]`",
        ),
        (
            "unknown_names = \"error\"\n",
            "`unknown_names` = \"error\": a key outside any table; it belongs in `[registry]`",
        ),
        (
            "breakers = 5\n",
            "`breakers` = 5: expected a table: write `[breakers.NAME]`, NAME the part's, followed by its keys",
        ),
        (
            "breaker = 5\n",
            "`breaker` = 5: a key outside any table; did you mean `breakers`?",
        ),
    ] {
        let err = refused_file(text, "accepted a key outside any table");
        let shown = err.to_string();
        assert!(shown.contains(expected), "{text}: {shown}");
        assert!(!shown.contains("registry:"), "{text}: {shown}");
    }
}

/// The configuration file shown in `Registry`'s documentation is valid.
#[test]
fn the_documented_configuration_file_loads() {
    let docs = include_str!("../../runtime/src/docs/registry.md");
    let start = docs.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + docs[start..].find("```").expect("its end");
    let registry = Registry::builder()
        .toml(&docs[start..end])
        .unwrap()
        .build()
        .unwrap();
    assert!(!registry.is_strict());
    assert!(registry.breaker("payments").is_some());
    assert!(registry.budget("payments").is_some());
    assert!(registry.bulkhead("payments").is_some());
    assert!(registry.throttle("payments").is_some());
}

const OPERATOR_FILE: &str = r#"
[registry]
unknown_names = "error"

[defaults.breaker]
failure_rate_threshold = 30

[breakers.payments]
failure_rate_threshold = 75
"#;

/// `toml` promised that the file wins over code for a name both give, but
/// code given after it won (the README's own example did this, silently
/// overriding the operator's file).
#[test]
fn code_given_after_the_file_does_not_override_it() {
    let from_code = || BreakerConfig::default().failure_rate_threshold(10.0);
    let file_first = Registry::builder()
        .toml(OPERATOR_FILE)
        .unwrap()
        .breaker("payments", from_code())
        .breaker("search", from_code())
        .default_breaker(BreakerConfig::default().failure_rate_threshold(20.0))
        .strict(false)
        .build()
        .unwrap();
    let code_first = Registry::builder()
        .breaker("payments", from_code())
        .breaker("search", from_code())
        .default_breaker(BreakerConfig::default().failure_rate_threshold(20.0))
        .strict(false)
        .toml(OPERATOR_FILE)
        .unwrap()
        .build()
        .unwrap();
    for (order, registry) in [("file first", &file_first), ("code first", &code_first)] {
        // The file's configuration, whole: the code's is not merged in.
        assert_eq!(
            registry.breaker("payments").unwrap().config(),
            &BreakerConfig::default().failure_rate_threshold(75.0),
            "{order}"
        );
        // Code still configures what the file does not mention.
        assert_eq!(
            registry.breaker("search").unwrap().config(),
            &from_code(),
            "{order}"
        );
        // `[registry] unknown_names` and `[defaults.breaker]` win too.
        assert!(registry.is_strict(), "{order}");
    }
    let defaults = Registry::builder()
        .toml("[defaults.breaker]\nfailure_rate_threshold = 30")
        .unwrap()
        .default_breaker(BreakerConfig::default().failure_rate_threshold(20.0))
        .build()
        .unwrap();
    let dep = Dep::default();
    let created = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(defaults.scope(async {
            unknown(&dep).await.unwrap();
            Registry::current().breaker("not-configured").unwrap()
        }));
    assert_eq!(
        created.config(),
        &BreakerConfig::default().failure_rate_threshold(30.0)
    );
}

/// A setting made in code that is invalid is refused even when a file
/// overrides it (helper audit, 2026-11-27: only the merged configuration
/// was validated, so a 500 % threshold in code went unreported until
/// someone removed the file's table). Its problem names the part, the key
/// and the value, as any other.
#[test]
fn an_invalid_setting_in_code_is_refused_even_where_a_file_overrides_it() {
    let err = Registry::builder()
        .breaker(
            "payments",
            BreakerConfig::default().failure_rate_threshold(500.0),
        )
        .default_breaker(BreakerConfig::default().failure_rate_threshold(-1.0))
        .toml("[breakers.payments]\nfailure_rate_threshold = 60\n\n[defaults.breaker]\nfailure_rate_threshold = 40\n")
        .unwrap()
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems().len(), 2, "{text}");
    assert!(text.contains("breaker `payments`"), "{text}");
    assert!(text.contains("failure_rate_threshold"), "{text}");
    assert!(text.contains("500"), "{text}");
    assert!(text.contains("-1"), "{text}");
    // Valid in code, the file's settings are what runs.
    let registry = Registry::builder()
        .breaker(
            "payments",
            BreakerConfig::default().failure_rate_threshold(10.0),
        )
        .toml("[breakers.payments]\nfailure_rate_threshold = 60\n")
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(
        registry.breaker("payments").unwrap().config(),
        &BreakerConfig::default().failure_rate_threshold(60.0)
    );
}

/// The registry accepted names no attribute can use (empty, with spaces,
/// with characters the attribute refuses): configuration that silently
/// configured nothing.
#[test]
fn names_no_attribute_can_use_are_refused_in_code_and_in_files() {
    let err = Registry::builder()
        .breaker("payments ", BreakerConfig::default())
        .budget(" payments", resilient::BudgetConfig::default())
        .bulkhead("", resilient::BulkheadConfig::default())
        .throttle("pay/ments", resilient::ThrottleConfig::default())
        .breaker("fine_name-1.v2", BreakerConfig::default())
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems().len(), 4, "{text}");
    for expected in [
        "breaker `payments `",
        "budget ` payments`",
        "bulkhead ``",
        "throttle `pay/ments`",
        "a space at the end",
        "a space at the start",
        "must not be empty",
        "`/`",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }

    let err = Registry::builder()
        .toml("[breakers.\"payments \"]\n\n[bulkheads.\"\"]\nmax_concurrent = 2\n\n[budgets.\"pay ments\"]\n")
        .unwrap()
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems().len(), 3, "{text}");
    let lines: Vec<_> = err.problems().iter().map(|p| p.line()).collect();
    assert_eq!(lines, [Some(1), Some(3), Some(6)], "{text}");
    assert!(text.contains("breaker `payments `"), "{text}");
    assert!(text.contains("bulkhead ``"), "{text}");
    assert!(text.contains("budget `pay ments`"), "{text}");
}

/// `[breakers] payments = 5` was refused naming neither the part nor the
/// section.
#[test]
fn a_part_that_is_not_a_table_is_refused_naming_its_section_part_and_line() {
    let err = Registry::builder()
        .toml("[registry]\nunknown_names = \"error\"\n\n[breakers]\npayments = 5\n")
        .unwrap()
        .build()
        .unwrap_err();
    let p = &err.problems()[0];
    assert_eq!(
        (p.section(), p.name(), p.table(), p.line()),
        ("breaker", Some("payments"), Some("breakers"), Some(5)),
        "{err}"
    );
    // Placed at the part's name, as every other refusal is at its key.
    assert_eq!(p.column(), Some(1), "{err}");
    let text = err.to_string();
    for expected in [
        "line 5",
        "[breakers]",
        "breaker `payments`",
        "`[breakers.payments]`",
        "5",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[resilient(breaker = "fraud.checks")]
async fn score(dep: &Dep) -> Result<(), E> {
    dep.call().await
}

/// A name with a `.` is quoted in TOML (`[breakers."fraud.checks"]`):
/// written bare, it was refused as an unknown key `checks` of a breaker
/// `fraud`, and a strict registry's refusal advised the bare form.
#[tokio::test]
async fn a_name_with_a_dot_is_configured_quoted_and_refusals_say_so() {
    let registry = Registry::builder()
        .toml("[breakers.\"fraud.checks\"]\nfailure_rate_threshold = 20\n")
        .unwrap()
        .build()
        .unwrap();
    let configured = registry.breaker("fraud.checks").unwrap();
    assert_eq!(
        configured.config(),
        &BreakerConfig::default().failure_rate_threshold(20.0)
    );
    let dep = Dep::default();
    registry.scope(score(&dep)).await.unwrap();
    assert!(Arc::ptr_eq(
        &configured,
        &registry.breaker("fraud.checks").unwrap()
    ));

    let err = Registry::builder()
        .toml("[breakers.fraud.checks]\nfailure_rate_threshold = 20\n")
        .unwrap()
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.problems().len(), 1, "{text}");
    assert_eq!(err.problems()[0].key(), "checks", "{text}");
    assert!(
        text.contains("[breakers.\"fraud.checks\"]"),
        "the refusal shows the quoted form: {text}"
    );
    // A strict registry's advice quotes it too: see
    // `a_scoped_registry_can_be_checked_against_the_names_in_use`.
}

/// A file that was not TOML was refused without its line and column.
#[test]
fn text_that_is_not_toml_is_refused_with_its_line_and_column() {
    let err = Registry::builder()
        .toml("[breakers.payments]\nfailure_rate_threshold = 50\n[breakers.search\n")
        .unwrap_err();
    let p = &err.problems()[0];
    assert_eq!(p.line(), Some(3), "{err}");
    assert!(p.column().is_some(), "{err}");
    assert!(err.to_string().contains("line 3, column"), "{err}");
    assert!(err.to_string().contains("not valid TOML"), "{err}");
}

/// The error of building a registry from `text`, which must be refused;
/// `accepted` says what a registry built from it would have let through.
fn refused_file(text: &str, accepted: &str) -> resilient::ConfigError {
    match Registry::builder().toml(text).and_then(|b| b.build()) {
        Ok(_) => panic!("{accepted}"),
        Err(e) => e,
    }
}

/// A key written twice in a table is refused naming the key, its table and
/// part, and the line of the repeat; a table written twice names the
/// table. Either way the rest of the file is still checked, so the other
/// problems come in the same report.
#[test]
fn a_key_or_table_written_twice_is_named_and_the_rest_still_checked() {
    let text = "[breakers.payments]\nfailure_rate_threshold = 50\nfailure_rate_threshold = 60\n\n\
                [bulkheads.payments]\nmax_concurrent = 0\n";
    let err = refused_file(text, "accepted a key written twice");
    let shown = err.to_string();
    let twice = err
        .problems()
        .iter()
        .find(|p| p.key() == "failure_rate_threshold")
        .unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(twice.line(), Some(3), "{shown}");
    assert_eq!(twice.table(), Some("breakers.payments"), "{shown}");
    assert_eq!(twice.name(), Some("payments"), "{shown}");
    assert_eq!(twice.value(), "60", "{shown}");
    assert!(
        shown.contains(
            "line 3, column 1: [breakers.payments] breaker `payments`: \
             `failure_rate_threshold` = 60: set more than once in this table"
        ),
        "{shown}"
    );
    assert!(
        err.problems().iter().any(|p| p.key() == "max_concurrent"),
        "the file's other problem is reported with it: {shown}"
    );

    let text =
        "[breakers.p]\nfailure_rate_threshold = 50\n[breakers.p]\nminimum_number_of_calls = 0\n";
    let err = refused_file(text, "accepted a table written twice");
    let shown = err.to_string();
    assert!(
        shown.contains("line 3, column 11: the table `[breakers.p]` is written more than once"),
        "{shown}"
    );
}

/// Every refusal from a file names the file, line, table, part and key.
#[test]
fn refusals_from_a_file_name_the_file_line_table_part_and_key() {
    let path = std::env::temp_dir().join(format!("resilient-{}-bad.toml", std::process::id()));
    std::fs::write(
        &path,
        "[breakers.payments]\nsliding_window_size = 10\nfailure_rate_threshold = 150\n\n[bulkheads.payments]\nslots = 3\n",
    )
    .unwrap();
    let err = Registry::builder()
        .toml_file(&path)
        .unwrap()
        .build()
        .unwrap_err();
    std::fs::remove_file(&path).unwrap();
    let shown = path.display().to_string();
    let text = err.to_string();
    let threshold = err
        .problems()
        .iter()
        .find(|p| p.key() == "failure_rate_threshold")
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(threshold.file(), Some(shown.as_str()));
    assert_eq!(threshold.line(), Some(3));
    assert_eq!(threshold.table(), Some("breakers.payments"));
    assert!(
        text.contains(&format!(
            "{shown}:3:1: [breakers.payments] breaker `payments`: `failure_rate_threshold` = 150"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{shown}:6:1: [bulkheads.payments] bulkhead `payments`: `slots` = 3"
        )),
        "{text}"
    );
}

/// A `ConfigError` returned from `main` is printed with `Debug`: it printed
/// a struct dump instead of the readable lines of its `Display`.
#[test]
fn config_error_debug_prints_the_same_lines_as_display() {
    let err = Registry::builder()
        .breaker(
            "payments",
            BreakerConfig::default().failure_rate_threshold(0.0),
        )
        .build()
        .unwrap_err();
    assert_eq!(format!("{err:?}"), err.to_string());
    assert!(
        format!("{err:?}").starts_with("invalid resilience configuration\n  breaker `payments`")
    );
    assert!(!format!("{err:?}").contains("problems:"));
}

/// A scoped registry, as tests use, can be checked against every name the
/// binary's annotated functions use.
#[test]
fn a_scoped_registry_can_be_checked_against_the_names_in_use() {
    let err = Registry::builder()
        .strict(true)
        .build()
        .unwrap()
        .check_names()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("breaker `payments`"), "{text}");
    assert!(text.contains("registry::pay"), "{text}");
    assert!(text.contains("breaker `not-configured`"), "{text}");
    assert!(text.contains("registry::unknown"), "{text}");
    // A name with a `.` is advised quoted, as TOML needs it.
    assert!(text.contains("breaker `fraud.checks`"), "{text}");
    assert!(
        text.contains("`[breakers.\"fraud.checks\"]` in the file"),
        "the advice is TOML that configures it: {text}"
    );
}

/// A refused value is shown as the file writes it (review 22: `1e300` was
/// shown as 301 digits, `nan` as `NaN`, `1e3` as `1000.0`, an array as
/// `[...]`), on one line.
#[test]
fn a_refused_value_is_shown_as_the_file_writes_it() {
    for (key, written) in [
        ("failure_rate_threshold", "1e300"),
        ("failure_rate_threshold", "nan"),
        ("sliding_window_size", "1e3"),
        ("minimum_number_of_calls", "[1, 2]"),
    ] {
        let err = Registry::builder()
            .toml(&format!("[breakers.dep]\n{key} = {written} # why\n"))
            .unwrap()
            .build()
            .unwrap_err();
        let p = &err.problems()[0];
        assert_eq!((p.key(), p.value()), (key, written), "{err}");
    }
    let err = Registry::builder()
        .toml("[breakers.dep]\nminimum_number_of_calls = [\n  1,\n  2,\n]\n")
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(err.problems()[0].value(), "[ 1, 2, ]", "{err}");
}

mod any_file {
    //! The file reader never panics, whatever the text: made of the
    //! pieces a resilience file has (headers, keys, values, each perhaps
    //! repeated, quoted or not ASCII) and of any text, it accepts or
    //! refuses, and every refusal is placed on a line of the text.

    use proptest::prelude::*;
    use resilient::Registry;

    fn line() -> impl Strategy<Value = String> {
        let header = prop::sample::select(vec![
            "[breakers.payments]",
            "[breakers.\"é x\"]",
            "[ breakers . p ]",
            "[bulkheads.p]",
            "[budgets.p]",
            "[throttles.p]",
            "[registry]",
            "[defaults.breaker]",
            "[[breakers.p]]",
            "[breakers]",
        ])
        .prop_map(str::to_owned);
        let key = prop::sample::select(vec![
            "failure_rate_threshold",
            "minimum_number_of_calls",
            "max_concurrent",
            "unknown_names",
            "\"é\"",
            "\"a key\"",
            "a.b",
            "p",
        ]);
        let value = prop::sample::select(vec![
            "50",
            "0",
            "-1",
            "nan",
            "inf",
            "1e400",
            "\"x\"",
            "\"é\"",
            "[1, 2]",
            "{ a = 1 }",
            "1979-05-27",
            "true",
            "",
            "\"unterminated",
        ]);
        let setting = (key, value).prop_map(|(k, v)| format!("{k} = {v}"));
        prop_oneof![3 => setting, 2 => header, 1 => "\\PC{0,12}"]
    }

    proptest! {
        #[test]
        fn the_reader_accepts_or_refuses_and_places_every_refusal(
            lines in prop::collection::vec(line(), 0..12)
        ) {
            let text = lines.join("\n");
            let last_line = text.lines().count().max(1) + 1;
            if let Err(err) = Registry::builder().toml(&text).and_then(|b| b.build()) {
                prop_assert!(!err.problems().is_empty());
                for p in err.problems() {
                    prop_assert!(!p.to_string().is_empty());
                    if let Some(line) = p.line() {
                        prop_assert!((1..=last_line).contains(&line), "{} in {:?}", p, text);
                    }
                }
            }
        }
    }
}

/// A misspelt section or key is refused with the name it was likely meant
/// to be, before the list of accepted ones (as the attribute's errors do).
#[test]
fn a_misspelt_section_or_key_is_refused_with_a_did_you_mean() {
    let text = "[registry]\nunknown_name = \"error\"\n\n\
                [breaker.payments]\nfailure_rate_threshold = 50\n\n\
                [defaults.breakers]\nminimum_number_of_calls = 5\n\n\
                [breakers.ledger]\nslow_call_duration_threshold = 5000\n\
                minimum_number_of_call = 10\nfailure_threshold = 50\n";
    let err = refused_file(text, "accepted misspelt names");
    let shown = err.to_string();
    for expected in [
        "`unknown_name` = \"error\": unknown key; did you mean `unknown_names`? \
         the `[registry]` section accepts",
        "unknown section `[breaker]`; did you mean `breakers`? expected one of",
        "unknown section `[defaults.breakers]`; did you mean `breaker`? `[defaults]` accepts",
        "`slow_call_duration_threshold` = 5000: unknown key; did you mean \
         `slow_call_duration_threshold_ms`? accepted keys are",
        "`minimum_number_of_call` = 10: unknown key; did you mean \
         `minimum_number_of_calls`? accepted keys are",
    ] {
        assert!(
            shown.contains(expected),
            "missing {expected:?} in:\n{shown}"
        );
    }
    // A name not close to any accepted one gets the list alone.
    assert!(
        shown.contains("`failure_threshold` = 50: unknown key; accepted keys are"),
        "{shown}"
    );
}
