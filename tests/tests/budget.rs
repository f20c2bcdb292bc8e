//! Retry budgets, driven by hand on tokio's paused clock.

use std::time::Duration;

use resilient::{BudgetConfig, BudgetKind, RetryBudget};
use tokio::time::{Instant, advance};

fn ratio_budget(ratio: f64, window_secs: u64, floor: u32) -> RetryBudget {
    let config = BudgetConfig::ratio(ratio)
        .window(Duration::from_secs(window_secs))
        .min_retries_per_second(floor);
    RetryBudget::new("payments", config).unwrap()
}

/// Retries granted by asking until the budget refuses (bounded, so a
/// budget that never refuses fails the test instead of hanging it).
fn drain(budget: &RetryBudget) -> u64 {
    let now = Instant::now();
    let mut granted = 0;
    while budget.try_retry(now) {
        granted += 1;
        assert!(granted < 100_000, "the budget never refused");
    }
    granted
}

#[tokio::test(start_paused = true)]
async fn ratio_budget_allows_ratio_of_requests_then_refuses() {
    let budget = ratio_budget(0.1, 10, 0);
    for _ in 0..100 {
        budget.on_request(Instant::now());
    }
    assert_eq!(drain(&budget), 10, "10% of 100 requests");
    assert!(
        !budget.try_retry(Instant::now()),
        "still refused after the budget is spent"
    );

    // Each new request earns a tenth of a retry.
    for _ in 0..10 {
        budget.on_request(Instant::now());
    }
    assert_eq!(drain(&budget), 1);
}

#[tokio::test(start_paused = true)]
async fn ratio_budget_adds_floor_times_window() {
    // 0.2 of 50 requests = 10, plus 3 per second over 5 s = 15.
    let budget = ratio_budget(0.2, 5, 3);
    for _ in 0..50 {
        budget.on_request(Instant::now());
    }
    assert_eq!(drain(&budget), 25);
}

#[tokio::test(start_paused = true)]
async fn floor_lets_a_quiet_client_retry() {
    let budget = ratio_budget(0.1, 10, 1);
    // One request earns no whole retry, but the floor grants 1 × 10 s.
    budget.on_request(Instant::now());
    assert!(budget.try_retry(Instant::now()));
    assert_eq!(drain(&budget), 9);

    let without_floor = ratio_budget(0.1, 10, 0);
    without_floor.on_request(Instant::now());
    assert!(!without_floor.try_retry(Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn ratio_window_forgets_old_requests_and_retries() {
    let budget = ratio_budget(0.5, 10, 0);
    for _ in 0..20 {
        budget.on_request(Instant::now());
    }
    assert_eq!(drain(&budget), 10);

    // Halfway through the window nothing has been forgotten.
    advance(Duration::from_secs(5)).await;
    assert!(!budget.try_retry(Instant::now()));

    // A full window later the old requests no longer earn retries, and the
    // old retries no longer count against new requests.
    advance(Duration::from_secs(6)).await;
    let snapshot = budget.snapshot();
    assert_eq!((snapshot.requests, snapshot.retries), (0, 0));
    assert!(
        !budget.try_retry(Instant::now()),
        "old requests still earn retries"
    );
    for _ in 0..4 {
        budget.on_request(Instant::now());
    }
    assert_eq!(drain(&budget), 2);
}

#[tokio::test(start_paused = true)]
async fn default_budget_is_ten_percent_plus_ten_per_second_over_ten_seconds() {
    let budget = RetryBudget::new("search", BudgetConfig::default()).unwrap();
    for _ in 0..1000 {
        budget.on_request(Instant::now());
    }
    assert_eq!(drain(&budget), 100 + 10 * 10);
}

#[tokio::test(start_paused = true)]
async fn token_bucket_failures_drain_until_half_then_retries_stop() {
    let budget = RetryBudget::new("search", BudgetConfig::token_bucket(10, 0.1)).unwrap();
    let now = Instant::now();
    assert!(budget.try_retry(now), "a full bucket allows retries");
    // 10 → 6 tokens: still above half.
    for _ in 0..4 {
        budget.on_failure(now);
    }
    assert!(budget.try_retry(now));
    // 5 tokens is not above half: retries stop.
    budget.on_failure(now);
    assert!(!budget.try_retry(now));
    assert_eq!(budget.snapshot().tokens, Some(5.0));
    // Permitted retries do not spend tokens; failures do.
    for _ in 0..20 {
        budget.on_failure(now);
    }
    assert_eq!(
        budget.snapshot().tokens,
        Some(0.0),
        "the bucket stops at zero"
    );
}

#[tokio::test(start_paused = true)]
async fn token_bucket_successes_refill_by_token_ratio_up_to_max() {
    let budget = RetryBudget::new("search", BudgetConfig::token_bucket(10, 0.1)).unwrap();
    let now = Instant::now();
    for _ in 0..5 {
        budget.on_failure(now);
    }
    assert!(!budget.try_retry(now));
    // 5.0 + 0.1 is above half again: exactly one success reopens retries.
    budget.on_success(now);
    assert_eq!(budget.snapshot().tokens, Some(5.1));
    assert!(budget.try_retry(now));
    for _ in 0..100 {
        budget.on_success(now);
    }
    assert_eq!(budget.snapshot().tokens, Some(10.0), "capped at max_tokens");
}

#[tokio::test(start_paused = true)]
async fn token_bucket_ignores_the_clock() {
    let budget = RetryBudget::new("search", BudgetConfig::token_bucket(4, 1.0)).unwrap();
    for _ in 0..2 {
        budget.on_failure(Instant::now());
    }
    advance(Duration::from_secs(3600)).await;
    assert!(
        !budget.try_retry(Instant::now()),
        "time alone refilled the bucket"
    );
}

#[tokio::test(start_paused = true)]
async fn snapshots_report_counts() {
    let budget = ratio_budget(0.1, 10, 1);
    for _ in 0..30 {
        budget.on_request(Instant::now());
    }
    assert!(budget.try_retry(Instant::now()));
    let s = budget.snapshot();
    assert_eq!(s.name, "payments");
    assert_eq!(s.kind, BudgetKind::Ratio);
    assert_eq!((s.requests, s.retries), (30, 1));
    assert_eq!(s.remaining, 3 + 10 - 1);
    assert_eq!((s.granted, s.refused, s.tokens), (1, 0, None));
    drain(&budget);
    let s = budget.snapshot();
    assert_eq!((s.granted, s.refused, s.remaining), (13, 1, 0));

    let bucket = RetryBudget::new("search", BudgetConfig::token_bucket(10, 0.5)).unwrap();
    bucket.on_failure(Instant::now());
    let s = bucket.snapshot();
    assert_eq!(s.kind, BudgetKind::TokenBucket);
    assert_eq!(s.tokens, Some(9.0));
    // 9 → 8 → 7 → 6 are above half; the fourth failure reaches 5 and
    // closes retries.
    assert_eq!(s.remaining, 4);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["kind"], "token_bucket");
    assert_eq!(json["name"], "search");
}

/// Many tasks on many threads spend one budget: the grants never exceed
/// what it allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_retries_never_overrun_the_budget() {
    let budget = std::sync::Arc::new(ratio_budget(0.1, 10, 0));
    for _ in 0..1000 {
        budget.on_request(Instant::now());
    }
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let budget = budget.clone();
            tokio::spawn(async move {
                (0..100)
                    .filter(|_| budget.try_retry(Instant::now()))
                    .count()
            })
        })
        .collect();
    let mut granted = 0;
    for t in tasks {
        granted += t.await.unwrap();
    }
    assert_eq!(granted, 100);
}
