//! Budgets and throttles, next to a breaker, in a process up for 25 days,
//! 49.7 days (2^32 ms), 400 days and ten years, through annotated calls
//! (review 38): the breaker opens, half-opens and closes, the budget is
//! spent and refills, the throttle forgets. `breaker_age.rs` covers the
//! breaker alone at more ages.

use std::time::Duration;

use resilient::{
    BreakerConfig, BudgetConfig, Classification, Classify, ErrorKind, Registry, SlidingWindow,
    State, ThrottleConfig, resilient,
};
use tokio::time::{Instant, advance};

#[derive(Debug)]
enum E {
    Down,
    Refused(resilient::Error),
}
impl From<resilient::Error> for E {
    fn from(e: resilient::Error) -> Self {
        E::Refused(e)
    }
}
impl Classify for E {
    fn classify(&self) -> Classification {
        match self {
            E::Down => Classification::Transient,
            E::Refused(e) => e.classify(),
        }
    }
    fn is_refusal(&self) -> Option<bool> {
        Some(matches!(self, E::Refused(_)))
    }
}

#[resilient(breaker = "up-br")]
async fn guarded(fail: bool) -> Result<(), E> {
    if fail { Err(E::Down) } else { Ok(()) }
}

#[resilient(breaker = "up-bu", retries = 1, idempotent, base_ms = 1, cap_ms = 1)]
async fn budgeted(fail: bool) -> Result<(), E> {
    if fail { Err(E::Down) } else { Ok(()) }
}

#[resilient(breaker = "up-th")]
async fn throttled(fail: bool) -> Result<(), E> {
    if fail { Err(E::Down) } else { Ok(()) }
}

const AGES: [(&str, Duration); 5] = [
    ("0 days", Duration::ZERO),
    ("25 days", Duration::from_secs(25 * 86_400)),
    ("49.71 days", Duration::from_millis(u32::MAX as u64 + 1000)),
    ("400 days", Duration::from_secs(400 * 86_400)),
    ("10 years", Duration::from_secs(10 * 365 * 86_400)),
];

fn registry() -> Registry {
    Registry::builder()
        .breaker(
            "up-br",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::TimeBased { seconds: 10 })
                .minimum_number_of_calls(4)
                .permitted_number_of_calls_in_half_open_state(2)
                .wait_duration_in_open_state(Duration::from_secs(5)),
        )
        .breaker(
            "up-th",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 1000 })
                .minimum_number_of_calls(1000),
        )
        .breaker(
            "up-bu",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 1000 })
                .minimum_number_of_calls(1000),
        )
        .budget(
            "up-bu",
            BudgetConfig::ratio(0.1)
                .min_retries_per_second(1)
                .window(Duration::from_secs(10)),
        )
        .throttle(
            "up-th",
            ThrottleConfig::default().window(Duration::from_secs(12)),
        )
        .build()
        .unwrap()
}

async fn advance_to(since: Instant, age: Duration) {
    let target = since + age;
    let now = Instant::now();
    if target > now {
        advance(target - now).await;
    }
}

#[tokio::test(start_paused = true)]
async fn breakers_budgets_and_throttles_work_at_every_age() {
    let born = Instant::now();
    for (label, age) in AGES {
        // Parts made before the clock moves on to the age, as at start-up.
        let reg = registry();
        advance_to(born, age).await;
        reg.scope(async {
            let reg = Registry::current();
            // -- The breaker opens on failures, refuses, half-opens, closes.
            let br = reg.breaker("up-br").unwrap();
            for _ in 0..4 {
                assert!(matches!(guarded(true).await, Err(E::Down)), "{label}");
                advance(Duration::from_millis(300)).await;
            }
            assert_eq!(br.state(), State::Open, "{label}");
            match guarded(false).await {
                Err(E::Refused(e)) => assert_eq!(e.kind(), ErrorKind::BreakerOpen, "{label}"),
                other => panic!("{label}: {other:?}"),
            }
            advance(Duration::from_secs(5)).await;
            guarded(false)
                .await
                .unwrap_or_else(|e| panic!("{label}: probe 1 {e:?}"));
            guarded(false)
                .await
                .unwrap_or_else(|e| panic!("{label}: probe 2 {e:?}"));
            assert_eq!(br.state(), State::Closed, "{label}");
            // The failures that opened it are not in the new window.
            guarded(true).await.unwrap_err();
            assert_eq!(br.state(), State::Closed, "{label}: {:?}", br.snapshot());

            // -- The budget: a reserve of 10 retries over 10 s, spent, then refilled.
            let budget = reg.budget("up-bu").unwrap();
            assert_eq!(
                budget.snapshot().remaining,
                10,
                "{label}: {:?}",
                budget.snapshot()
            );
            for _ in 0..15 {
                let _ = budgeted(true).await;
            }
            let spent = budget.snapshot();
            assert_eq!(spent.remaining, 0, "{label}: {spent:?}");
            assert!(spent.refused > 0, "{label}: {spent:?}");
            advance(Duration::from_secs(11)).await;
            let refilled = budget.snapshot();
            assert_eq!(refilled.remaining, 10, "{label}: {refilled:?}");
            assert_eq!(refilled.retries, 0, "{label}: {refilled:?}");

            // -- The throttle saw only rejections; 12 s later it has forgotten them.
            let th = reg.throttle("up-th").unwrap();
            for _ in 0..20 {
                let _ = throttled(true).await;
            }
            let before = th.snapshot();
            assert!(before.rejection_probability > 0.5, "{label}: {before:?}");
            assert!(before.requests > 0, "{label}: {before:?}");
            advance(Duration::from_secs(13)).await;
            let after = th.snapshot();
            assert_eq!(
                (after.requests, after.accepts),
                (0, 0),
                "{label}: {after:?}"
            );
            assert_eq!(after.rejection_probability, 0.0, "{label}: {after:?}");
            throttled(false)
                .await
                .unwrap_or_else(|e| panic!("{label}: {e:?}"));
        })
        .await;
    }
}
