//! Metrics end to end: a real `metrics-exporter-prometheus` exporter
//! listening on 127.0.0.1, annotated calls, and the text scraped over HTTP,
//! asserting series and values.
//!
//! One test: the recorder is process-wide and call sites register their
//! handles with the recorder installed at their first call.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use resilient::metrics as names;
use resilient::{
    BreakerConfig, BulkheadConfig, Classification, Classify, Registry, State, resilient,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;
use support::PanicsOn;

#[derive(Debug)]
enum E {
    Unavailable,
    Refused(resilient::Error),
}

impl fmt::Display for E {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unavailable")
    }
}

impl From<resilient::Error> for E {
    fn from(e: resilient::Error) -> Self {
        E::Refused(e)
    }
}

impl Classify for E {
    fn classify(&self) -> Classification {
        match self {
            E::Unavailable => Classification::Transient,
            E::Refused(e) => e.classify(),
        }
    }
}

fn fail_while(fails: &AtomicU32) -> Result<u32, E> {
    if fails
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        Err(E::Unavailable)
    } else {
        Ok(1)
    }
}

#[resilient(breaker = "m-pay")]
async fn pay() -> Result<u32, E> {
    Ok(1)
}

#[resilient(breaker = "m-flap")]
async fn flap() -> Result<u32, E> {
    Ok(1)
}

#[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 1, breaker = "m-flaky")]
async fn flaky(fails: &AtomicU32) -> Result<u32, E> {
    fail_while(fails)
}

#[resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1)]
async fn always_fails() -> Result<u32, E> {
    Err(E::Unavailable)
}

#[resilient(timeout_ms = 10)]
async fn hangs() -> Result<u32, E> {
    std::future::pending::<()>().await;
    Ok(1)
}

#[resilient(bulkhead = "m-full")]
async fn behind_full_bulkhead() -> Result<u32, E> {
    Ok(1)
}

#[resilient(bulkhead = "m-wait")]
async fn waits_for_a_slot() -> Result<u32, E> {
    Ok(1)
}

#[resilient(
    retries = 1,
    idempotent,
    backoff = "exponential",
    base_ms = 60000,
    cap_ms = 60000
)]
async fn backs_off_a_minute() -> Result<u32, E> {
    Err(E::Unavailable)
}

/// Fails its first attempt; its retry, 200 ms later, finds the bulkhead's
/// only slot taken.
#[resilient(
    retries = 1,
    idempotent,
    bulkhead = "m-retry-wait",
    backoff = "exponential",
    base_ms = 200,
    cap_ms = 200
)]
async fn retry_waits_for_a_slot() -> Result<u32, E> {
    Err(E::Unavailable)
}

#[resilient(retries = 1, idempotent)]
async fn hangs_until_cut() -> Result<u32, E> {
    std::future::pending::<()>().await;
    Ok(1)
}

static SECOND_HANGS: AtomicU32 = AtomicU32::new(0);

#[resilient(
    retries = 1,
    idempotent,
    backoff = "exponential",
    base_ms = 1,
    cap_ms = 1
)]
async fn fails_then_hangs() -> Result<u32, E> {
    if SECOND_HANGS.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(E::Unavailable);
    }
    std::future::pending::<()>().await;
    Ok(1)
}

/// Answers after 30 ms: the call's duration includes them.
async fn degraded(_error: E) -> Result<u32, E> {
    tokio::time::sleep(Duration::from_millis(30)).await;
    Ok(0)
}

async fn never_answers(_error: E) -> Result<u32, E> {
    std::future::pending().await
}

fn explodes(_: &E) -> Classification {
    panic!("a classifier with a bug")
}

/// Its body fails and its classifier panics: its one attempt ran.
#[resilient(classify = explodes)]
async fn misclassified() -> Result<u32, E> {
    Err(E::Unavailable)
}

/// Its fallback answers, but a tracing layer panics on the WARN that
/// says so.
#[resilient(fallback = degraded)]
async fn fallback_log_panics() -> Result<u32, E> {
    Err(E::Unavailable)
}

/// Its fallback never answers: its caller's timeout cuts it there.
#[resilient(fallback = never_answers)]
async fn cut_in_its_fallback() -> Result<u32, E> {
    Err(E::Unavailable)
}

#[resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1, fallback = degraded)]
async fn with_fallback() -> Result<u32, E> {
    Err(E::Unavailable)
}

/// The Prometheus text over HTTP/1.0 (no chunked encoding) on loopback.
async fn scrape(port: u16) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("the exporter listens");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"));
    let (_, body) = response.split_once("\r\n\r\n").expect("a body");
    body.to_owned()
}

/// Every sample of the scrape: (name, labels) -> value.
type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

fn parse(text: &str) -> Samples {
    let mut samples = Samples::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').unwrap();
                let labels = inner
                    .split("\",")
                    .filter(|kv| !kv.is_empty())
                    .map(|kv| {
                        let (k, v) = kv.split_once("=\"").unwrap();
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name, labels)
            }
            None => (series, BTreeMap::new()),
        };
        samples.insert((name.to_owned(), labels), value.parse().unwrap());
    }
    samples
}

fn get(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    *samples
        .get(&(name.to_owned(), labels.clone()))
        .unwrap_or_else(|| {
            let near: Vec<_> = samples.keys().filter(|(n, _)| n == name).collect();
            panic!("no series {name}{labels:?}; series of that name: {near:?}")
        })
}

const F: &str = "metrics_prometheus::";

#[tokio::test]
async fn a_prometheus_scrape_shows_calls_attempts_retries_and_every_part() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    PrometheusBuilder::new()
        .with_http_listener(([127, 0, 0, 1], port))
        .set_buckets(&[0.001, 0.01, 0.1, 1.0])
        .unwrap()
        .install()
        .expect("the recorder installs before any annotated call");

    let registry = Registry::builder()
        .breaker("m-pay", BreakerConfig::default())
        .breaker("m-flap", BreakerConfig::default())
        .bulkhead("m-full", BulkheadConfig::default().max_concurrent(1))
        .bulkhead(
            "m-wait",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(10)),
        )
        .bulkhead(
            "m-retry-wait",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(10)),
        )
        .build()
        .unwrap();
    let _publisher =
        resilient::metrics::spawn_publisher(registry.clone(), Duration::from_secs(3600));

    // Three successes; then the breaker is forced open and refuses one.
    for _ in 0..3 {
        registry.scope(pay()).await.unwrap();
    }
    registry
        .breaker("m-pay")
        .unwrap()
        .transition_to(State::ForcedOpen);
    assert!(matches!(registry.scope(pay()).await, Err(E::Refused(_))));

    // One failure then a success: one retry.
    let fails = AtomicU32::new(1);
    registry.scope(flaky(&fails)).await.unwrap();
    // Two failed attempts, then the call fails.
    assert!(registry.scope(always_fails()).await.is_err());
    // The attempt timeout cuts the only attempt.
    assert!(registry.scope(hangs()).await.is_err());
    // The fallback answers.
    assert_eq!(registry.scope(with_fallback()).await.unwrap(), 0);
    // A classifier that panics: the panic reaches the caller's task.
    let panicked = tokio::spawn(registry.scope(misclassified())).await;
    assert!(panicked.unwrap_err().is_panic());
    // A tracing layer panics on the fallback's WARN: the call is counted,
    // as cancelled (review 33: counted nowhere).
    {
        use futures_util::FutureExt;
        use tracing_subscriber::layer::SubscriberExt;
        let layer = tracing_subscriber::registry().with(PanicsOn("fallback answers"));
        let _logging = tracing::subscriber::set_default(layer);
        let call = std::panic::AssertUnwindSafe(fallback_log_panics());
        assert!(call.catch_unwind().await.is_err(), "the layer panicked");
    }
    // The caller's timeout cuts a call while its fallback runs: cancelled,
    // not served.
    let cut = tokio::time::timeout(Duration::from_millis(20), cut_in_its_fallback()).await;
    assert!(cut.is_err(), "cut while its fallback waits");

    // The caller's timeout cuts a call during its backoff: no retry made.
    let cut = tokio::time::timeout(Duration::from_millis(20), backs_off_a_minute()).await;
    assert!(cut.is_err(), "cut during its minute of backoff");

    // Calls their callers cut while an attempt runs: the first attempt (on
    // the lean path), a later one (in the retry loop).
    for cut in [
        tokio::time::timeout(Duration::from_millis(20), hangs_until_cut()).await,
        tokio::time::timeout(Duration::from_millis(50), fails_then_hangs()).await,
    ] {
        assert!(cut.is_err(), "the caller's timeout cut the call");
    }

    // The caller's timeout cuts a call whose retry waits for a bulkhead
    // slot: the retry was never made (helper audit, 2026-11-27: counted
    // once its backoff had passed, before it was admitted).
    let call = tokio::spawn(registry.scope(tokio::time::timeout(
        Duration::from_millis(600),
        retry_waits_for_a_slot(),
    )));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let retry_bulkhead = registry.bulkhead("m-retry-wait").unwrap();
    let slot = retry_bulkhead
        .try_acquire()
        .expect("the first attempt has given its slot back");
    assert!(call.await.unwrap().is_err(), "cut while its retry waits");
    drop(slot);

    // A full bulkhead refuses at once (no `max_wait`).
    let full = registry.scope(behind_full_bulkhead()).await; // creates nothing: configured
    assert!(full.is_ok());
    let bulkhead = registry.bulkhead("m-full").unwrap();
    let held = bulkhead.try_acquire().unwrap();
    assert!(matches!(
        registry.scope(behind_full_bulkhead()).await,
        Err(E::Refused(e)) if e.kind() == resilient::ErrorKind::BulkheadFull
    ));

    // A call waits for a slot of another bulkhead while we scrape.
    let waiting_bulkhead = registry.bulkhead("m-wait").unwrap();
    let wait_permit = waiting_bulkhead.try_acquire().unwrap();
    let waiter = tokio::spawn(registry.scope(waits_for_a_slot()));
    tokio::time::sleep(Duration::from_millis(50)).await;

    resilient::metrics::publish(&registry);
    let during = parse(&scrape(port).await);
    assert_eq!(
        get(&during, names::BULKHEAD_WAITING, &[("bulkhead", "m-wait")]),
        1.0
    );
    assert_eq!(
        get(
            &during,
            names::BULKHEAD_IN_FLIGHT,
            &[("bulkhead", "m-full")]
        ),
        1.0
    );
    drop(wait_permit);
    assert_eq!(waiter.await.unwrap().unwrap(), 1);
    drop(held);

    resilient::metrics::publish(&registry);
    let s = parse(&scrape(port).await);

    // Calls by outcome.
    let pay = format!("{F}pay");
    let calls = |function: &str, outcome: &str| {
        get(
            &s,
            names::CALLS,
            &[("function", function), ("outcome", outcome)],
        )
    };
    assert_eq!(calls(&pay, "success"), 3.0);
    assert_eq!(calls(&pay, "failure"), 0.0);
    assert_eq!(
        get(
            &s,
            names::CALLS,
            &[
                ("function", &pay),
                ("outcome", "refused"),
                ("reason", "breaker_open")
            ]
        ),
        1.0
    );
    assert_eq!(calls(&format!("{F}flaky"), "success"), 1.0);
    assert_eq!(calls(&format!("{F}always_fails"), "failure"), 1.0);
    assert_eq!(calls(&format!("{F}hangs"), "timeout"), 1.0);
    assert_eq!(calls(&format!("{F}with_fallback"), "fallback"), 1.0);
    assert_eq!(calls(&format!("{F}with_fallback"), "failure"), 0.0);
    // A call its fallback answers is timed to the answer (review 23: the
    // fallback's time was left out).
    let answered = get(
        &s,
        &format!("{}_sum", names::CALL_DURATION),
        &[
            ("function", &format!("{F}with_fallback")),
            ("outcome", "fallback"),
        ],
    );
    assert!(
        (0.030..1.0).contains(&answered),
        "the fallback took 30 ms: {answered}"
    );
    // One cut while its fallback ran is cancelled, and served nothing
    // (review 23: counted as a fallback served).
    assert_eq!(calls(&format!("{F}cut_in_its_fallback"), "cancelled"), 1.0);
    assert_eq!(calls(&format!("{F}fallback_log_panics"), "cancelled"), 1.0);
    assert_eq!(calls(&format!("{F}fallback_log_panics"), "fallback"), 0.0);
    assert_eq!(calls(&format!("{F}cut_in_its_fallback"), "fallback"), 0.0);
    let served = |function: &str| {
        registry
            .snapshot()
            .fallbacks
            .iter()
            .filter(|f| f.function.ends_with(function))
            .map(|f| f.served)
            .sum::<u64>()
    };
    assert_eq!(served("::with_fallback"), 1);
    assert_eq!(served("::cut_in_its_fallback"), 0);
    assert_eq!(
        get(
            &s,
            names::CALLS,
            &[
                ("function", &format!("{F}behind_full_bulkhead")),
                ("outcome", "refused"),
                ("reason", "bulkhead_full")
            ]
        ),
        1.0
    );

    // Attempts and retries.
    let attempts = |function: &str, outcome: &str| {
        get(
            &s,
            names::ATTEMPTS,
            &[("function", function), ("outcome", outcome)],
        )
    };
    assert_eq!(attempts(&format!("{F}flaky"), "failure"), 1.0);
    assert_eq!(attempts(&format!("{F}flaky"), "success"), 1.0);
    assert_eq!(attempts(&format!("{F}always_fails"), "failure"), 2.0);
    assert_eq!(attempts(&format!("{F}hangs"), "timeout"), 1.0);
    assert_eq!(attempts(&pay, "refused"), 1.0);
    let retries = |function: &str| get(&s, names::RETRIES, &[("function", function)]);
    assert_eq!(retries(&format!("{F}flaky")), 1.0);
    assert_eq!(retries(&format!("{F}always_fails")), 1.0);
    assert_eq!(retries(&pay), 0.0);
    assert_eq!(attempts(&format!("{F}backs_off_a_minute"), "failure"), 1.0);
    // A cut call is `cancelled`, with the attempt it cut; one cut in its
    // backoff has no attempt running.
    let cancelled = |function: &str| calls(&format!("{F}{function}"), "cancelled");
    assert_eq!(cancelled("hangs_until_cut"), 1.0);
    assert_eq!(cancelled("fails_then_hangs"), 1.0);
    assert_eq!(cancelled("backs_off_a_minute"), 1.0);
    assert_eq!(attempts(&format!("{F}hangs_until_cut"), "cancelled"), 1.0);
    assert_eq!(attempts(&format!("{F}fails_then_hangs"), "failure"), 1.0);
    assert_eq!(attempts(&format!("{F}fails_then_hangs"), "cancelled"), 1.0);
    assert_eq!(retries(&format!("{F}fails_then_hangs")), 1.0);
    // The attempt whose classifier panicked ran: counted, as cancelled
    // with its call (review 23: not counted at all).
    assert_eq!(cancelled("misclassified"), 1.0);
    assert_eq!(attempts(&format!("{F}misclassified"), "cancelled"), 1.0);
    assert!(
        !s.keys().any(|(name, labels)| name == names::ATTEMPTS
            && labels.get("function").map(String::as_str)
                == Some(&*format!("{F}backs_off_a_minute"))
            && labels.get("outcome").map(String::as_str) == Some("cancelled")),
        "no attempt ran when the call was cut"
    );
    assert!(
        !s.keys().any(|(name, labels)| name == names::CALLS
            && labels.get("outcome").map(String::as_str) == Some("cancelled")
            && labels.get("function").map(String::as_str) == Some(&*pay)),
        "calls that ended are not cancelled"
    );
    assert_eq!(
        retries(&format!("{F}backs_off_a_minute")),
        0.0,
        "a retry its caller never waited for is not counted"
    );
    assert_eq!(cancelled("retry_waits_for_a_slot"), 1.0);
    assert_eq!(
        attempts(&format!("{F}retry_waits_for_a_slot"), "failure"),
        1.0
    );
    assert_eq!(
        retries(&format!("{F}retry_waits_for_a_slot")),
        0.0,
        "a retry that never got a bulkhead slot is not counted"
    );

    // Latency histograms: one sample per call and per attempt; the timed-out
    // attempt ran for its 10 ms timeout.
    let count = |name: &str, function: &str, outcome: &str| {
        get(
            &s,
            &format!("{name}_count"),
            &[("function", function), ("outcome", outcome)],
        )
    };
    assert_eq!(count(names::CALL_DURATION, &pay, "success"), 3.0);
    assert_eq!(
        count(
            names::ATTEMPT_DURATION,
            &format!("{F}always_fails"),
            "failure"
        ),
        2.0
    );
    let hang = get(
        &s,
        &format!("{}_sum", names::ATTEMPT_DURATION),
        &[("function", &format!("{F}hangs")), ("outcome", "timeout")],
    );
    assert!(
        (0.010..0.5).contains(&hang),
        "the attempt ran 10 ms: {hang}"
    );
    assert_eq!(
        get(
            &s,
            &format!("{}_bucket", names::ATTEMPT_DURATION),
            &[
                ("function", &format!("{F}hangs")),
                ("outcome", "timeout"),
                ("le", "0.001")
            ]
        ),
        0.0
    );

    // Breakers: state gauge, transitions, refusals, ratios (NaN: too few calls).
    let state = |state: &str| {
        get(
            &s,
            names::BREAKER_STATE,
            &[("breaker", "m-pay"), ("state", state)],
        )
    };
    assert_eq!(state("forced_open"), 1.0);
    assert_eq!(state("closed"), 0.0);
    assert_eq!(
        get(
            &s,
            names::BREAKER_TRANSITIONS,
            &[
                ("breaker", "m-pay"),
                ("from", "closed"),
                ("to", "forced_open")
            ]
        ),
        1.0
    );
    assert_eq!(
        get(&s, names::BREAKER_NOT_PERMITTED, &[("breaker", "m-pay")]),
        1.0
    );
    assert!(get(&s, names::BREAKER_FAILURE_RATIO, &[("breaker", "m-flaky")]).is_nan());
    assert_eq!(
        get(&s, names::BREAKER_BUFFERED_CALLS, &[("breaker", "m-flaky")]),
        2.0
    );

    // Bulkheads: nothing in flight or waiting now; one refusal.
    assert_eq!(
        get(&s, names::BULKHEAD_IN_FLIGHT, &[("bulkhead", "m-full")]),
        0.0
    );
    assert_eq!(
        get(&s, names::BULKHEAD_WAITING, &[("bulkhead", "m-wait")]),
        0.0
    );
    assert_eq!(
        get(
            &s,
            names::BULKHEAD_MAX_CONCURRENT,
            &[("bulkhead", "m-full")]
        ),
        1.0
    );
    assert_eq!(
        get(&s, names::BULKHEAD_REFUSED, &[("bulkhead", "m-full")]),
        1.0
    );

    // Budgets: the flaky call's retry was granted by its dependency's budget.
    assert_eq!(
        get(&s, names::BUDGET_GRANTED, &[("budget", "m-flaky")]),
        1.0
    );
    assert_eq!(
        get(&s, names::BUDGET_REFUSED, &[("budget", "m-flaky")]),
        0.0
    );
    assert!(get(&s, names::BUDGET_REMAINING, &[("budget", "m-flaky")]) >= 0.0);

    // Shutdown gauges exist and say "running".
    assert_eq!(get(&s, names::SHUTTING_DOWN, &[]), 0.0);

    // A reset zeroes the breaker's own count of refusals, not the exported
    // counter: refusals after it still count.
    let breaker = registry.breaker("m-pay").unwrap();
    breaker.reset();
    breaker.transition_to(State::ForcedOpen);
    for _ in 0..2 {
        // (`pay` names the function's label here.)
        assert!(matches!(
            registry.scope(crate::pay()).await,
            Err(E::Refused(_))
        ));
    }
    assert_eq!(breaker.snapshot().not_permitted_calls, 2);
    resilient::metrics::publish(&registry);
    let after_reset = parse(&scrape(port).await);
    assert_eq!(
        get(
            &after_reset,
            names::BREAKER_NOT_PERMITTED,
            &[("breaker", "m-pay")]
        ),
        3.0,
        "one refusal before the reset, two after"
    );

    // Transitions are counted by the breaker, not from its events: a slow
    // subscriber and a burst of refusals fill the event queue, which drops
    // the transition events, and every transition is counted all the same.
    let slow = registry.subscribe(|_| std::thread::sleep(Duration::from_millis(5)));
    let flapping = registry.breaker("m-flap").unwrap();
    for _ in 0..2 {
        flapping.transition_to(State::ForcedOpen);
        for _ in 0..2 * resilient::EventHub::QUEUE_CAPACITY {
            assert!(matches!(registry.scope(flap()).await, Err(E::Refused(_))));
        }
        flapping.transition_to(State::Closed);
    }
    assert!(
        slow.dropped_events() > 0,
        "the queue dropped events, as it must for this check to mean anything"
    );
    resilient::metrics::publish(&registry);
    let flapped = parse(&scrape(port).await);
    for (from, to) in [("closed", "forced_open"), ("forced_open", "closed")] {
        assert_eq!(
            get(
                &flapped,
                names::BREAKER_TRANSITIONS,
                &[("breaker", "m-flap"), ("from", from), ("to", to)]
            ),
            2.0,
            "{from} -> {to}"
        );
    }

    // Labels come only from function and part names and fixed words.
    for (name, labels) in s.keys() {
        if name.starts_with("resilient_") {
            for key in labels.keys() {
                assert!(
                    [
                        "function", "outcome", "reason", "breaker", "bulkhead", "budget", "state",
                        "from", "to", "le", "quantile"
                    ]
                    .contains(&key.as_str()),
                    "unexpected label {key} on {name}"
                );
            }
        }
    }
}
