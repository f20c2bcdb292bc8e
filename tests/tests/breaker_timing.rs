//! How a breaker times the calls of annotated functions for its slow-call
//! check. Every call starts on tokio's clock. With a count-based window and
//! a threshold of at least 100 ticks of the system's coarse clock (4 ms
//! ticks on most Linux kernels), a body ready at its first poll ends on the
//! coarse clock (real time), and a body that waits ends on tokio's
//! (`runtime/src/clock.rs`). A call that waits is slow exactly when it took
//! longer than the threshold on tokio's clock, paused or not; a call that
//! never waits, when it blocked its thread for longer (with a tick of
//! slack). Thresholds are 500 ms here: coarse-timed on a kernel with ticks
//! of up to 5 ms, precisely timed elsewhere, and the same answers either way.

use std::time::Duration;

use resilient::{
    BreakerConfig, Classification, Classify, Registry, SlidingWindow, State, resilient,
};

#[derive(Debug)]
struct E;

impl From<resilient::Error> for E {
    fn from(_: resilient::Error) -> Self {
        E
    }
}

impl Classify for E {
    fn classify(&self) -> Classification {
        Classification::Transient
    }
}

const THRESHOLD: Duration = Duration::from_millis(500);

/// A breaker that opens when half of its last four calls were slow.
fn timed() -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size: 4 })
        .minimum_number_of_calls(4)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration_threshold(THRESHOLD)
}

fn registry() -> Registry {
    Registry::builder()
        .breaker("timed", timed())
        .build()
        .unwrap()
}

/// Blocks its thread for `block` (no `.await`: the body is ready at its
/// first poll unless `sleep` is not zero), then sleeps `sleep` on tokio's
/// clock.
#[resilient(breaker = "timed")]
async fn call(block: Duration, sleep: Duration) -> Result<(), E> {
    if !block.is_zero() {
        std::thread::sleep(block);
    }
    if !sleep.is_zero() {
        tokio::time::sleep(sleep).await;
    }
    Ok(())
}

fn slow_calls(registry: &Registry) -> u32 {
    registry.breaker("timed").unwrap().snapshot().slow_calls
}

#[tokio::test(start_paused = true)]
async fn on_a_paused_clock_a_call_is_as_slow_as_the_clock_says() {
    let registry = registry();
    registry
        .scope(async {
            // Ready at once: no time passes on a paused clock.
            call(Duration::ZERO, Duration::ZERO).await.unwrap();
            // Waits exactly the threshold: not slow.
            call(Duration::ZERO, THRESHOLD).await.unwrap();
            assert_eq!(slow_calls(&registry), 0);
            // Waits longer than the threshold on the paused clock, which
            // real time does not see at all: slow.
            call(Duration::ZERO, THRESHOLD + Duration::from_millis(1))
                .await
                .unwrap();
            assert_eq!(slow_calls(&registry), 1);
            call(Duration::ZERO, Duration::from_secs(3600))
                .await
                .unwrap();
            assert_eq!(slow_calls(&registry), 2);
            assert_eq!(
                registry.breaker("timed").unwrap().state(),
                State::Open,
                "2 slow calls of 4"
            );
        })
        .await;
}

/// Moves the paused clock itself, before any other wait.
#[resilient(breaker = "timed")]
async fn advance(by: Duration) -> Result<(), E> {
    tokio::time::advance(by).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn time_a_body_moves_the_paused_clock_by_before_its_first_wait_counts() {
    let registry = registry();
    registry
        .scope(async {
            advance(THRESHOLD).await.unwrap();
            assert_eq!(slow_calls(&registry), 0, "exactly the threshold");
            advance(Duration::from_secs(2)).await.unwrap();
            assert_eq!(slow_calls(&registry), 1);
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn on_a_paused_clock_real_time_before_the_first_wait_does_not_count() {
    let registry = registry();
    registry
        .scope(async {
            // 10 ms of real time (two ticks and more), then exactly the
            // threshold on the paused clock: not slow.
            call(Duration::from_millis(10), THRESHOLD).await.unwrap();
            call(
                Duration::from_millis(10),
                THRESHOLD - Duration::from_millis(7),
            )
            .await
            .unwrap();
            assert_eq!(slow_calls(&registry), 0);
        })
        .await;
}

/// The largest threshold accepted (one day): no call here is slow, and
/// adding the coarse clock's tick to it does not overflow. (Past it, the
/// breaker is refused: `breaker_config.rs`.)
#[resilient(breaker = "never")]
async fn never_slow() -> Result<(), E> {
    Ok(())
}

#[tokio::test]
async fn the_largest_threshold_counts_no_call_slow() {
    let registry = Registry::builder()
        .breaker(
            "never",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 4 })
                .minimum_number_of_calls(4)
                .slow_call_duration_threshold(BreakerConfig::MAX_SLOW_CALL_DURATION_THRESHOLD),
        )
        .build()
        .unwrap();
    registry
        .scope(async {
            never_slow().await.unwrap();
            never_slow().await.unwrap();
        })
        .await;
    let snapshot = registry.breaker("never").unwrap().snapshot();
    assert_eq!((snapshot.buffered_calls, snapshot.slow_calls), (2, 0));
}

#[tokio::test]
async fn a_body_that_blocks_its_thread_past_the_threshold_is_slow() {
    let registry = registry();
    registry
        .scope(async {
            call(Duration::ZERO, Duration::ZERO).await.unwrap();
            assert_eq!(slow_calls(&registry), 0, "a call ready at once");
            // Never waits: timed on the coarse clock where there is one.
            call(THRESHOLD + Duration::from_millis(150), Duration::ZERO)
                .await
                .unwrap();
            assert_eq!(slow_calls(&registry), 1);
        })
        .await;
}

#[tokio::test]
async fn a_body_that_blocks_then_waits_is_timed_from_its_start() {
    let registry = registry();
    registry
        .scope(async {
            // 100 ms blocked, then 100 ms waiting: well under the threshold.
            call(Duration::from_millis(100), Duration::from_millis(100))
                .await
                .unwrap();
            assert_eq!(slow_calls(&registry), 0);
            // 400 ms blocked before its first wait, then 250 ms waiting:
            // slow only if the blocked time is counted too.
            call(Duration::from_millis(400), Duration::from_millis(250))
                .await
                .unwrap();
            assert_eq!(slow_calls(&registry), 1);
        })
        .await;
}

/// A half-open probe is timed as a call of the closed breaker is: on a
/// paused clock, a probe that blocked its thread past the threshold and
/// never waited was timed on tokio's clock, which had not moved, and was
/// not slow, while the same body in the closed breaker was (review 34).
#[tokio::test(start_paused = true)]
async fn a_probe_gets_the_verdict_a_closed_breakers_call_gets() {
    let registry = Registry::builder()
        .breaker(
            "timed",
            timed().permitted_number_of_calls_in_half_open_state(1),
        )
        .build()
        .unwrap();
    let blocked = THRESHOLD + Duration::from_millis(150);
    registry
        .scope(async {
            // Closed: slow where the coarse clock times it (Linux), not
            // where tokio's paused clock does.
            call(blocked, Duration::ZERO).await.unwrap();
            let slow_when_closed = slow_calls(&registry) == 1;
            let breaker = registry.breaker("timed").unwrap();
            breaker.transition_to(State::HalfOpen);
            call(blocked, Duration::ZERO).await.unwrap();
            let expected = if slow_when_closed {
                State::Open
            } else {
                State::Closed
            };
            assert_eq!(
                breaker.state(),
                expected,
                "the probe was slow: {}, the closed breaker's call: {slow_when_closed}",
                breaker.state() == State::Open
            );
        })
        .await;
}
