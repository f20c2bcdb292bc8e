//! One retrying layer: when annotated functions call each other in one
//! task, only the layer closest to the failing dependency retries a given
//! failure. Without the rule, four layers of `retries = 3` would make
//! 4 x 4 x 4 x 4 = 256 attempts per user request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilient::{Classification, Classify, resilient};

#[derive(Debug)]
enum E {
    Unavailable,
    Resilience(resilient::Error),
}

impl From<resilient::Error> for E {
    fn from(e: resilient::Error) -> Self {
        E::Resilience(e)
    }
}

// Deliberately classify everything as transient, refusals included: the
// rule must hold even when a user's classification is careless.
impl Classify for E {
    fn classify(&self) -> Classification {
        Classification::Transient
    }
}

#[derive(Clone, Default)]
struct Dep {
    attempts: Arc<AtomicU32>,
    fail: bool,
}

impl Dep {
    async fn call(&self) -> Result<(), E> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        if self.fail {
            Err(E::Unavailable)
        } else {
            Ok(())
        }
    }
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn layer1(dep: &Dep) -> Result<(), E> {
    dep.call().await
}
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn layer2(dep: &Dep) -> Result<(), E> {
    layer1(dep).await
}
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn layer3(dep: &Dep) -> Result<(), E> {
    layer2(dep).await
}
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn layer4(dep: &Dep) -> Result<(), E> {
    layer3(dep).await
}

#[tokio::test(start_paused = true)]
async fn four_nested_retrying_layers_make_at_most_four_attempts() {
    let dep = Dep {
        fail: true,
        ..Dep::default()
    };
    assert!(matches!(layer4(&dep).await, Err(E::Unavailable)));
    assert_eq!(dep.attempts.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn each_user_request_is_its_own_scope() {
    let dep = Dep {
        fail: true,
        ..Dep::default()
    };
    for n in 1..=5 {
        let _ = layer4(&dep).await;
        assert_eq!(dep.attempts.load(Ordering::SeqCst), 4 * n);
    }
}

#[resilient(deadline_ms = 1000)]
async fn no_retry_inner(dep: &Dep) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn retrying_outer(dep: &Dep) -> Result<(), E> {
    no_retry_inner(dep).await
}

#[tokio::test(start_paused = true)]
async fn an_outer_layer_retries_when_the_inner_one_does_not() {
    let dep = Dep {
        fail: true,
        ..Dep::default()
    };
    assert!(retrying_outer(&dep).await.is_err());
    assert_eq!(dep.attempts.load(Ordering::SeqCst), 4);
}

#[resilient(deadline_ms = 50)]
async fn short_inner(dep: &Dep) -> Result<(), E> {
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn outer_over_refusal(dep: &Dep, calls: &AtomicU32) -> Result<(), E> {
    calls.fetch_add(1, Ordering::SeqCst);
    short_inner(dep).await
}

#[tokio::test(start_paused = true)]
async fn a_nested_refusal_is_not_retried_even_if_classified_transient() {
    let dep = Dep::default();
    let calls = AtomicU32::new(0);
    match outer_over_refusal(&dep, &calls).await {
        Err(E::Resilience(e)) => assert!(e.is_deadline_exceeded()),
        other => panic!("expected the inner deadline, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(dep.attempts.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_spawned_task_inherits_the_deadline_through_propagate() {
    let remaining = resilient::with_deadline(std::time::Duration::from_secs(2), async {
        tokio::spawn(resilient::propagate(async { resilient::remaining() }))
            .await
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(remaining, Some(std::time::Duration::from_secs(2)));
    let plain = resilient::with_deadline(std::time::Duration::from_secs(2), async {
        tokio::spawn(async { resilient::remaining() })
            .await
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(plain, None, "tokio::spawn alone does not carry task-locals");
}

// The same four layers, with the innermost naming its dependency, whose
// retry budget (10 % of requests, no floor here) then caps retries across
// all requests.
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10, breaker = "dep")]
async fn budgeted1(dep: &Dep) -> Result<(), E> {
    dep.call().await
}
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn budgeted2(dep: &Dep) -> Result<(), E> {
    budgeted1(dep).await
}
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn budgeted3(dep: &Dep) -> Result<(), E> {
    budgeted2(dep).await
}
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
async fn budgeted4(dep: &Dep) -> Result<(), E> {
    budgeted3(dep).await
}

#[tokio::test(start_paused = true)]
async fn with_the_budget_four_layers_average_at_most_1_1_attempts_per_request() {
    let registry = resilient::Registry::builder()
        .breaker(
            "dep",
            resilient::BreakerConfig::default().initial_state(resilient::State::Disabled),
        )
        .budget(
            "dep",
            resilient::BudgetConfig::ratio(0.1)
                .window(std::time::Duration::from_secs(10))
                .min_retries_per_second(0),
        )
        .build()
        .unwrap();
    registry
        .scope(async {
            let dep = Dep {
                fail: true,
                ..Dep::default()
            };
            let warm_up = 200;
            let requests = 2000;
            let mut after_warm_up = 0;
            for n in 0..requests {
                if n == warm_up {
                    after_warm_up = dep.attempts.load(Ordering::SeqCst);
                }
                assert!(budgeted4(&dep).await.is_err());
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            let measured = dep.attempts.load(Ordering::SeqCst) - after_warm_up;
            let per_request = f64::from(measured) / f64::from(requests - warm_up);
            assert!(
                per_request <= 1.1,
                "{per_request} attempts per user request"
            );
            assert!(
                per_request > 1.0,
                "some retries still go through: {per_request}"
            );
        })
        .await;
}

/// Regression: each layer used to store its inner future several times,
/// so nested annotated calls grew exponentially (87 KB at four layers) and
/// overflowed the stack in debug builds. Each layer now adds a constant.
#[test]
fn nested_layers_grow_futures_linearly() {
    let dep = Dep::default();
    let one = std::mem::size_of_val(&layer1(&dep));
    let two = std::mem::size_of_val(&layer2(&dep));
    let four = std::mem::size_of_val(&layer4(&dep));
    let per_layer = two - one;
    assert_eq!(four, two + 2 * per_layer, "sizes {one}, {two}, {four}");
    assert!(four < 4 * one, "sizes {one}, {two}, {four}");
}

// An outer attempt's `timeout_ms` must stay the outer layer's own timeout,
// retried there, even when the body awaits an annotated call (which
// inherits the attempt's deadline and so sees it pass first).
#[resilient(deadline_ms = 60000)]
async fn inner_plain(dep: &Dep, hang_first: &AtomicU32) -> Result<(), E> {
    if hang_first.fetch_add(1, Ordering::SeqCst) == 0 {
        std::future::pending::<()>().await;
    }
    dep.call().await
}

#[resilient(retries = 2, idempotent, timeout_ms = 100, base_ms = 1, cap_ms = 1)]
async fn outer_with_timeout(dep: &Dep, hang_first: &AtomicU32) -> Result<(), E> {
    inner_plain(dep, hang_first).await
}

#[tokio::test(start_paused = true)]
async fn an_outer_timeout_is_retried_even_when_a_nested_call_saw_it_first() {
    let dep = Dep::default();
    let hang_first = AtomicU32::new(0);
    outer_with_timeout(&dep, &hang_first)
        .await
        .expect("the first attempt times out, the second succeeds");
    assert_eq!(hang_first.load(Ordering::SeqCst), 2);
    assert_eq!(dep.attempts.load(Ordering::SeqCst), 1);
}

async fn degraded(_dep: &Dep, _error: E) -> Result<(), E> {
    Ok(())
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1, fallback = degraded)]
async fn inner_with_fallback(dep: &Dep) -> Result<(), E> {
    dep.call().await
}

#[resilient(fallback = degraded)]
async fn inner_once_with_fallback(dep: &Dep) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 1)]
async fn outer_after_fallback(dep: &Dep, flaky: &AtomicU32, once: bool) -> Result<(), E> {
    if once {
        inner_once_with_fallback(dep).await?;
    } else {
        inner_with_fallback(dep).await?;
    }
    // A failure of the outer layer's own, after the inner one was answered
    // by its fallback.
    if flaky.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(E::Unavailable);
    }
    Ok(())
}

/// A fallback takes back its layer's give-up: the outer layer still
/// retries a failure of its own, as long as the path has attempts left.
#[tokio::test(start_paused = true)]
async fn a_give_up_answered_by_a_fallback_does_not_stop_outer_retries() {
    let dep = Dep {
        fail: true,
        ..Dep::default()
    };
    let flaky = AtomicU32::new(0);
    outer_after_fallback(&dep, &flaky, true)
        .await
        .expect("retried after its own failure");
    assert_eq!(flaky.load(Ordering::SeqCst), 2);
    assert_eq!(dep.attempts.load(Ordering::SeqCst), 2);
}

/// But it does not give back the attempts that reached the dependency:
/// when the inner layer spent the path's four, retrying the outer layer
/// would send the request down again (the dependency would see 8).
#[tokio::test(start_paused = true)]
async fn a_fallback_does_not_give_back_the_attempts_it_spent() {
    let dep = Dep {
        fail: true,
        ..Dep::default()
    };
    let flaky = AtomicU32::new(0);
    assert!(outer_after_fallback(&dep, &flaky, false).await.is_err());
    assert_eq!(flaky.load(Ordering::SeqCst), 1);
    assert_eq!(dep.attempts.load(Ordering::SeqCst), 4);
}

// A hanging dependency behind layers that name no part, and a timeout of
// the user's own (not the library's, which nested calls would inherit as
// their deadline) that cuts the middle layer while the inner one is on its
// third attempt. The middle layer, dropped, must pass on how far the path
// got, or the outer layer would retry from the start of the path.
#[resilient(retries = 3, idempotent, timeout_ms = 100, base_ms = 1, cap_ms = 1)]
async fn hangs_inner(attempts: &AtomicU32) -> Result<(), E> {
    attempts.fetch_add(1, Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(())
}
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn hangs_middle(attempts: &AtomicU32) -> Result<(), E> {
    hangs_inner(attempts).await
}
#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn hangs_outer(attempts: &AtomicU32) -> Result<(), E> {
    let cut = Duration::from_millis(250);
    match tokio::time::timeout(cut, hangs_middle(attempts)).await {
        Ok(result) => result,
        Err(_) => Err(E::Unavailable),
    }
}

#[tokio::test(start_paused = true)]
async fn a_layer_cut_by_the_users_own_timeout_passes_on_how_far_the_path_got() {
    let attempts = AtomicU32::new(0);
    assert!(hangs_outer(&attempts).await.is_err());
    // The path allows four attempts of the dependency, however the
    // timeouts cut the layers.
    assert_eq!(attempts.load(Ordering::SeqCst), 4);
}

/// The dependency's answer said "do not retry" (it already retried on the
/// caller's behalf): final for every enclosing layer too, as a nested
/// give-up is, even one that classifies its own error transient.
/// (Review 7: the outer layer retried it 3 times, and the dependency that
/// said not to retry was called 4 times.)
mod do_not_retry {
    use super::*;

    #[derive(Debug)]
    struct DependencySaidNo;

    impl From<resilient::Error> for DependencySaidNo {
        fn from(_: resilient::Error) -> Self {
            DependencySaidNo
        }
    }

    impl Classify for DependencySaidNo {
        fn classify(&self) -> Classification {
            Classification::DoNotRetry { retry_after: None }
        }
    }

    #[resilient(deadline_ms = 1000)]
    async fn fetch(calls: &AtomicU32) -> Result<(), DependencySaidNo> {
        calls.fetch_add(1, Ordering::SeqCst);
        Err(DependencySaidNo)
    }

    // The outer layer's error type classifies everything transient (`E`).
    #[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 10)]
    async fn outer(calls: &AtomicU32) -> Result<(), E> {
        fetch(calls).await.map_err(|_| E::Unavailable)
    }

    #[tokio::test(start_paused = true)]
    async fn a_nested_do_not_retry_is_final_for_enclosing_layers() {
        let calls = AtomicU32::new(0);
        let (result, report) = resilient::observe(outer(&calls)).await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{report:?}");
        assert!(report.gave_up(), "{report:?}");
    }
}
