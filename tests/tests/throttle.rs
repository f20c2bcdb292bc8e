//! Adaptive throttling, driven by hand on tokio's paused clock with a
//! seeded generator.

use std::time::Duration;

use resilient::{AdaptiveThrottle, ThrottleConfig};
use tokio::time::{Instant, advance};

fn throttle(k: f64, window_secs: u64) -> AdaptiveThrottle {
    let config = ThrottleConfig::default()
        .k(k)
        .window(Duration::from_secs(window_secs));
    AdaptiveThrottle::new("search", config).unwrap()
}

#[tokio::test(start_paused = true)]
async fn nothing_is_shed_while_the_backend_accepts_everything() {
    resilient::seed_jitter(1);
    let throttle = throttle(2.0, 120);
    for _ in 0..10_000 {
        assert!(
            throttle.admit(Instant::now()),
            "shed a call to a healthy backend"
        );
        throttle.on_outcome(true, Instant::now());
    }
    assert_eq!(throttle.rejection_probability(Instant::now()), 0.0);
    assert_eq!(throttle.snapshot().shed, 0);
}

#[tokio::test(start_paused = true)]
async fn probability_follows_the_sre_formula() {
    let throttle = throttle(2.0, 120);
    let now = Instant::now();
    // 10 requests, 2 accepted: (10 - 2 × 2) / (10 + 1).
    for i in 0..10 {
        throttle.admit(now);
        throttle.on_outcome(i < 2, now);
    }
    let p = throttle.rejection_probability(now);
    assert!((p - 6.0 / 11.0).abs() < 1e-12, "p = {p}");
    let s = throttle.snapshot();
    assert_eq!((s.requests, s.accepts), (10, 2));
}

#[tokio::test(start_paused = true)]
async fn k_sets_how_much_more_than_accepted_is_sent() {
    let throttle = throttle(1.0, 120);
    let now = Instant::now();
    for i in 0..10 {
        throttle.admit(now);
        throttle.on_outcome(i < 5, now);
    }
    // (10 - 1 × 5) / 11: with K = 1 half the traffic is already shed.
    let p = throttle.rejection_probability(now);
    assert!((p - 5.0 / 11.0).abs() < 1e-12, "p = {p}");
}

/// With a backend that accepts nothing, `accepts` stays 0 and every call,
/// shed or not, counts as a request: the probability after `n` calls is
/// `n / (n + 1)`, so the shed fraction over many calls approaches 1 in the
/// way the formula predicts.
#[tokio::test(start_paused = true)]
async fn shed_fraction_converges_to_the_formula_when_the_backend_rejects_all() {
    resilient::seed_jitter(7);
    let throttle = throttle(2.0, 120);
    let calls = 20_000u64;
    let mut shed = 0u64;
    let mut expected = 0.0;
    for n in 0..calls {
        let now = Instant::now();
        let p = throttle.rejection_probability(now);
        let predicted = n as f64 / (n as f64 + 1.0);
        assert!((p - predicted).abs() < 1e-12, "after {n} calls p = {p}");
        expected += p;
        if throttle.admit(now) {
            throttle.on_outcome(false, now);
        } else {
            shed += 1;
        }
    }
    let s = throttle.snapshot();
    assert_eq!(s.requests, calls, "shed calls must count as requests");
    assert_eq!(s.shed, shed);
    // Bernoulli draws: the standard deviation of the count is at most
    // sqrt(calls)/2 ≈ 71; allow about five of them.
    let diff = (shed as f64 - expected).abs();
    assert!(diff < 350.0, "shed {shed}, expected {expected:.0}");
    // Without shed calls counting, p would stay at n/(n+1) over admitted
    // calls only and the total shed would be far smaller.
    assert!(shed > calls - 100, "shed only {shed} of {calls}");
}

/// Half the backend's answers are accepts: the shed fraction settles where
/// `K × accepts` of the requests get through. Checked against the formula
/// at each step, over many seeded draws.
#[tokio::test(start_paused = true)]
async fn shed_fraction_matches_the_formula_with_partial_acceptance() {
    resilient::seed_jitter(42);
    let throttle = throttle(2.0, 120);
    // Warm up with 1000 requests of which 100 were accepted.
    let now = Instant::now();
    for i in 0..1000 {
        throttle.admit(now);
        throttle.on_outcome(i % 10 == 0, now);
    }
    let p = throttle.rejection_probability(now);
    let predicted = (1000.0 - 2.0 * 100.0) / 1001.0;
    assert!((p - predicted).abs() < 1e-12);

    // Now only count shed decisions at that probability: 10 000 calls whose
    // admitted ones are accepted a tenth of the time.
    let mut shed = 0u64;
    let mut expected = 0.0;
    for i in 0..10_000u64 {
        expected += throttle.rejection_probability(now);
        if throttle.admit(now) {
            throttle.on_outcome(i % 10 == 0, now);
        } else {
            shed += 1;
        }
    }
    let diff = (shed as f64 - expected).abs();
    assert!(diff < 250.0, "shed {shed}, expected {expected:.0}");
    assert!(
        shed > 5000,
        "a backend accepting a tenth of calls should see most shed: {shed}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_window_forgets_rejections() {
    resilient::seed_jitter(3);
    let throttle = throttle(2.0, 10);
    for _ in 0..100 {
        throttle.admit(Instant::now());
        throttle.on_outcome(false, Instant::now());
    }
    assert!(throttle.rejection_probability(Instant::now()) > 0.9);

    advance(Duration::from_secs(5)).await;
    assert!(
        throttle.rejection_probability(Instant::now()) > 0.9,
        "forgot too soon"
    );

    advance(Duration::from_secs(6)).await;
    assert_eq!(throttle.rejection_probability(Instant::now()), 0.0);
    assert!(throttle.admit(Instant::now()));
    assert_eq!(throttle.snapshot().requests, 1);
}

#[tokio::test(start_paused = true)]
async fn default_is_k_2_over_two_minutes() {
    let throttle = AdaptiveThrottle::new("search", ThrottleConfig::default()).unwrap();
    let s = throttle.snapshot();
    assert_eq!((s.k, s.window), (2.0, Duration::from_secs(120)));
    for _ in 0..10 {
        throttle.admit(Instant::now());
    }
    advance(Duration::from_secs(100)).await;
    assert!(
        throttle.rejection_probability(Instant::now()) > 0.0,
        "forgot before two minutes"
    );
    advance(Duration::from_secs(21)).await;
    assert_eq!(throttle.rejection_probability(Instant::now()), 0.0);
}

#[tokio::test(start_paused = true)]
async fn snapshot_serialises() {
    let throttle = throttle(2.0, 60);
    throttle.admit(Instant::now());
    let json = serde_json::to_value(throttle.snapshot()).unwrap();
    assert_eq!(json["name"], "search");
    assert_eq!(json["requests"], 1);
    assert_eq!(json["accepts"], 0);
}
