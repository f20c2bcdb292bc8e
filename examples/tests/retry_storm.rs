//! The retry-storm experiment's headline numbers, computed by running it
//! (`resilient_examples::storm`, the same runs as `cargo run --release -p
//! resilient-examples --example outage`): the promises of the one-retrying-
//! layer rule and of the retry budget, in every outage shape.
//!
//! The library's configurations run at the example's rate (200 requests/s).
//! The naive nested loops make up to a hundred calls per request, so their
//! runs here use 20 requests/s (`storm::run_at`), with the overloaded
//! dependency's capacity scaled alike: the same dynamics, a tenth of the
//! work, a few seconds in a debug build.

use resilient_examples::storm::{self, Config, Report, Shape};

const LIBRARY: [Config; 3] = [Config::Defaults, Config::Budget, Config::BreakerBudget];

/// The budget's promise: retries at most 10 % of requests, plus its floor
/// of 10 retries per second, whose share at `RATE` requests per second is
/// 10 / RATE; plus 0.01 for the edges of the window's one-second slots.
fn budget_bound() -> f64 {
    1.1 + 10.0 / f64::from(storm::RATE) + 0.01
}

/// The request rate of the naive runs.
const NAIVE_RATE: u32 = 20;

fn assert_at_most_four_per_request(r: &Report) {
    assert!(
        r.worst_attempts() <= 4,
        "{} / {}: a user request made {} attempts",
        r.shape.name(),
        r.config.name(),
        r.worst_attempts()
    );
}

#[tokio::test(start_paused = true)]
async fn three_naive_layers_of_three_retries_make_64_attempts_the_library_4() {
    for layers in 1..=4 {
        let naive = storm::attempts_of_one_request(layers, true).await;
        assert_eq!(naive, 4u32.pow(layers), "{layers} naive layers");
        let library = storm::attempts_of_one_request(layers, false).await;
        assert_eq!(library, 4, "{layers} annotated layers");
    }
}

#[tokio::test(start_paused = true)]
async fn naive_nested_loops_multiply_attempts_when_the_dependency_refuses_fast() {
    let r = storm::run_at(Shape::Refuse, Config::Naive, NAIVE_RATE).await;
    // Four layers of 4 attempts: up to 256, cut by the 10 s deadline.
    assert!(
        r.mean_attempts_during() > 50.0,
        "{}",
        r.mean_attempts_during()
    );
}

#[tokio::test(start_paused = true)]
async fn one_retrying_layer_when_the_dependency_refuses_fast() {
    for config in LIBRARY {
        assert_at_most_four_per_request(&storm::run(Shape::Refuse, config).await);
    }
}

#[tokio::test(start_paused = true)]
async fn one_retrying_layer_when_the_dependency_hangs() {
    for config in LIBRARY {
        assert_at_most_four_per_request(&storm::run(Shape::Hang, config).await);
    }
}

#[tokio::test(start_paused = true)]
async fn one_retrying_layer_when_the_dependency_is_overloaded() {
    for config in LIBRARY {
        assert_at_most_four_per_request(&storm::run(Shape::Overload, config).await);
    }
}

#[tokio::test(start_paused = true)]
async fn the_budget_caps_attempts_per_request_when_the_dependency_refuses_fast() {
    let r = storm::run(Shape::Refuse, Config::Budget).await;
    let mean = r.mean_attempts_after_warm_up();
    assert!(mean <= budget_bound(), "{mean} attempts per request");
    assert!(mean > 1.0, "some retries still go through: {mean}");
}

#[tokio::test(start_paused = true)]
async fn the_budget_caps_attempts_per_request_when_the_dependency_hangs() {
    let r = storm::run(Shape::Hang, Config::Budget).await;
    let mean = r.mean_attempts_after_warm_up();
    assert!(mean <= budget_bound(), "{mean} attempts per request");
}

#[tokio::test(start_paused = true)]
async fn the_budget_caps_attempts_per_request_when_the_dependency_is_overloaded() {
    let r = storm::run(Shape::Overload, Config::Budget).await;
    let mean = r.mean_attempts_after_warm_up();
    assert!(mean <= budget_bound(), "{mean} attempts per request");
}

#[tokio::test(start_paused = true)]
async fn naive_retries_keep_an_overloaded_dependency_collapsed_after_the_surge() {
    let r = storm::run_at(Shape::Overload, Config::Naive, NAIVE_RATE).await;
    assert!(r.success_after() < 0.1, "{}", r.success_after());
    assert_eq!(r.recovery(), None);
}

#[tokio::test(start_paused = true)]
async fn with_the_budget_an_overloaded_dependency_recovers_after_the_surge() {
    for config in [Config::Budget, Config::BreakerBudget] {
        let r = storm::run(Shape::Overload, config).await;
        let recovery = r.recovery().expect("recovers");
        assert!(
            recovery.as_secs() <= 10,
            "{}: every request succeeds again only {recovery:?} after the surge",
            config.name()
        );
        assert!(
            r.success_after() > 0.7,
            "{}: {}",
            config.name(),
            r.success_after()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_breaker_keeps_calls_off_a_failing_dependency() {
    for shape in Shape::ALL {
        let r = storm::run(shape, Config::BreakerBudget).await;
        // Open most of the fault: well under one call per request.
        assert!(
            r.mean_attempts_after_warm_up() < 0.5,
            "{}: {}",
            shape.name(),
            r.mean_attempts_after_warm_up()
        );
    }
}

/// Two runs in one process, the second starting half a second later in the
/// second than the first: the same figures, as long as the library's
/// budgets and breakers count time from their own creation. Since main's
/// 4f5ab7b their windows' one-second slots align to a process-wide origin
/// taken from the real clock, so in paused time the figures depend on when
/// in the second a run starts, and the example prints differently from one
/// process to the next.
#[tokio::test(start_paused = true)]
async fn the_experiment_prints_the_same_every_run() {
    let a = storm::run(Shape::Refuse, Config::Budget).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let b = storm::run(Shape::Refuse, Config::Budget).await;
    assert_eq!(a.requests, b.requests);
    assert_eq!(a.attempts_per_second, b.attempts_per_second);
}
