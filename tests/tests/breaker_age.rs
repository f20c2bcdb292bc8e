//! Breakers that work on day 25 and day 400 (issue 7, item 5): nothing may
//! depend on how long a breaker has lived. Paused time makes a decade cheap.

use std::time::Duration;

use resilient::{Breaker, BreakerConfig, Classification, SlidingWindow, State};
use tokio::time::{Instant, advance};

const SUCCESS: Option<Classification> = None;
const FAILURE: Option<Classification> = Some(Classification::Transient);
const DAY: Duration = Duration::from_secs(24 * 3600);
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The ages the issue names, in increasing order.
const AGES: [(&str, Duration); 9] = [
    ("0 days", Duration::ZERO),
    ("24 days", Duration::from_secs(24 * 86_400)),
    ("25 days", Duration::from_secs(25 * 86_400)),
    ("40 days", Duration::from_secs(40 * 86_400)),
    ("49 days", Duration::from_secs(49 * 86_400)),
    ("75 days", Duration::from_secs(75 * 86_400)),
    ("90 days", Duration::from_secs(90 * 86_400)),
    ("400 days", Duration::from_secs(400 * 86_400)),
    ("10 years", Duration::from_secs(10 * 365 * 86_400)),
];

/// A time-based window of `seconds`, rated from 10 calls, 60 s open.
fn time_window(seconds: u32) -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::TimeBased { seconds })
        .minimum_number_of_calls(10)
}

fn breaker(config: BreakerConfig) -> Breaker {
    Breaker::new("dep", config).expect("valid config")
}

fn call(b: &Breaker, outcome: Option<Classification>) {
    b.try_acquire()
        .expect("breaker should admit the call")
        .record(outcome);
}

/// Moves the paused clock to `since + age`.
async fn advance_to(since: Instant, age: Duration) {
    let now = Instant::now();
    let target = since + age;
    if target > now {
        advance(target - now).await;
    }
}

#[tokio::test(start_paused = true)]
async fn ten_failures_in_a_row_open_a_time_window_breaker_at_every_age() {
    let born = Instant::now();
    // One breaker per age, all born now, each tried at its age.
    let breakers: Vec<_> = AGES.iter().map(|_| breaker(time_window(10))).collect();
    for ((label, age), b) in AGES.iter().zip(&breakers) {
        advance_to(born, *age).await;
        for i in 0..10 {
            assert_eq!(b.state(), State::Closed, "{label}: after {i} failures");
            call(b, FAILURE);
            advance(Duration::from_millis(100)).await;
        }
        assert_eq!(
            b.state(),
            State::Open,
            "a {label} old breaker: ten failures in a row open it"
        );
        assert_eq!(b.snapshot().failed_calls, 10, "{label}");
    }
}

#[tokio::test(start_paused = true)]
async fn ten_failures_in_a_row_open_a_count_window_breaker_at_every_age() {
    let born = Instant::now();
    let breakers: Vec<_> = AGES
        .iter()
        .map(|_| {
            breaker(
                BreakerConfig::default()
                    .sliding_window(SlidingWindow::CountBased { size: 10 })
                    .minimum_number_of_calls(10),
            )
        })
        .collect();
    for ((label, age), b) in AGES.iter().zip(&breakers) {
        advance_to(born, *age).await;
        for _ in 0..10 {
            call(b, FAILURE);
        }
        assert_eq!(b.state(), State::Open, "{label}");
    }
}

/// A burst recorded at `age`, then an idle `gap`: the window must be empty
/// afterwards, and a fresh run of successes must be rated on its own.
async fn burst_then_gap(window: u32, age: Duration, gap: Duration, label: &str) {
    let b = breaker(time_window(window));
    advance(age).await;
    for _ in 0..5 {
        call(&b, FAILURE);
    }
    assert_eq!(b.snapshot().failed_calls, 5, "{label}: the burst is in");
    advance(gap).await;
    let snapshot = b.snapshot();
    assert_eq!(
        (snapshot.buffered_calls, snapshot.failed_calls),
        (0, 0),
        "{label}: after the gap the window no longer shows the burst"
    );
    for _ in 0..10 {
        call(&b, SUCCESS);
    }
    let snapshot = b.snapshot();
    assert_eq!(
        (snapshot.buffered_calls, snapshot.failed_calls),
        (10, 0),
        "{label}: the new calls are counted, the old failures are not"
    );
    assert_eq!(snapshot.failure_rate, Some(0.0), "{label}");
    // And it still opens on a real outage.
    for _ in 0..10 {
        call(&b, FAILURE);
    }
    assert_eq!(b.state(), State::Open, "{label}: 10 of 20 failed");
}

#[tokio::test(start_paused = true)]
async fn after_an_idle_second_a_one_second_window_no_longer_shows_the_burst() {
    burst_then_gap(1, Duration::ZERO, Duration::from_secs(1), "1 s gap, new").await;
    burst_then_gap(1, 25 * DAY, Duration::from_secs(1), "1 s gap, day 25").await;
    burst_then_gap(1, 400 * DAY, Duration::from_secs(1), "1 s gap, day 400").await;
}

#[tokio::test(start_paused = true)]
async fn after_an_idle_month_the_window_no_longer_shows_the_burst() {
    burst_then_gap(10, Duration::ZERO, 30 * DAY, "30 day gap, new").await;
    burst_then_gap(10, 25 * DAY, 30 * DAY, "30 day gap, day 25").await;
    burst_then_gap(60, 3 * DAY, 30 * DAY, "30 day gap, 60 s window").await;
}

#[tokio::test(start_paused = true)]
async fn after_an_idle_year_the_window_no_longer_shows_the_burst() {
    burst_then_gap(10, Duration::ZERO, YEAR, "1 year gap, new").await;
    burst_then_gap(86_400, 40 * DAY, YEAR, "1 year gap, one-day window").await;
}

#[tokio::test(start_paused = true)]
async fn a_gap_of_exactly_the_old_tag_period_does_not_revive_the_burst() {
    // 2^22 s was the old tag period, 2^19 s is the wrapping period of
    // today's second tags: a bucket of that age must not count as current.
    for period in [1u64 << 22, 1 << 19] {
        let b = breaker(time_window(10));
        for _ in 0..5 {
            call(&b, FAILURE);
        }
        advance(Duration::from_secs(period)).await;
        for _ in 0..5 {
            call(&b, SUCCESS);
        }
        let snapshot = b.snapshot();
        assert_eq!(
            (snapshot.buffered_calls, snapshot.failed_calls),
            (5, 0),
            "after {period} s"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_open_wait_lasts_its_full_length_at_every_age_up_to_40_years() {
    let born = Instant::now();
    let ages = AGES
        .iter()
        .copied()
        .chain([("36 years", 36 * YEAR), ("40 years", 40 * YEAR)]);
    let ages: Vec<_> = ages.collect();
    let breakers: Vec<_> = ages
        .iter()
        .map(|_| {
            breaker(
                BreakerConfig::default()
                    .sliding_window(SlidingWindow::CountBased { size: 4 })
                    .minimum_number_of_calls(4)
                    .wait_duration_in_open_state(Duration::from_secs(60)),
            )
        })
        .collect();
    for ((label, age), b) in ages.iter().zip(&breakers) {
        advance_to(born, *age).await;
        for _ in 0..4 {
            call(b, FAILURE);
        }
        let err = b.try_acquire().expect_err("just opened");
        assert_eq!(
            err.retry_in(),
            Some(Duration::from_secs(60)),
            "a {label} old breaker opens for its whole wait"
        );
        advance(Duration::from_secs(59)).await;
        assert!(b.try_acquire().is_err(), "{label}: still open at 59 s");
        advance(Duration::from_secs(1)).await;
        assert!(b.try_acquire().is_ok(), "{label}: a probe at 60 s");
    }
}
