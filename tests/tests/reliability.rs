//! Promises that used to break outside the easy outage shape: concurrent
//! calls in one task, calls refused locally, errors returned at a timeout's
//! instant, failures that may have taken effect, absurd `Retry-After`s and
//! far deadlines. Each test is named after what it reproduces.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use resilient::{
    AttemptOutcome, BreakerConfig, BudgetConfig, BulkheadConfig, Classification, Classify,
    ErrorKind, IdempotencyKey, Registry, State, resilient,
};

#[derive(Debug)]
enum E {
    Unavailable,
    Declined,
    Throttled(Duration),
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
            E::Unavailable => Classification::Transient,
            E::Declined => Classification::Permanent,
            E::Throttled(after) => Classification::Throttled {
                retry_after: Some(*after),
            },
            E::Resilience(e) => e.classify(),
        }
    }
}

/// Fails its first `failures` calls, then succeeds; each call takes
/// `latency`; counts calls.
#[derive(Debug, Default)]
struct Flaky {
    calls: AtomicU32,
    failures: u32,
    latency: Duration,
}

impl Flaky {
    fn failing(failures: u32) -> Self {
        Flaky {
            calls: AtomicU32::new(0),
            failures,
            latency: Duration::from_millis(10),
        }
    }

    fn slow(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    async fn call(&self) -> Result<(), E> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.latency).await;
        if n < self.failures {
            Err(E::Unavailable)
        } else {
            Ok(())
        }
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

// ---- Concurrent calls in one task do not share give-up accounting ----

#[resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1)]
async fn gives_up_fast(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 50, cap_ms = 50)]
async fn recovers_slowly(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 1)]
async fn joins_two(a: &Flaky, b: &Flaky) -> Result<(), E> {
    let (ra, rb) = tokio::join!(gives_up_fast(a), recovers_slowly(b));
    assert!(ra.is_err(), "the first sibling always fails");
    rb.expect("the second sibling recovers on its third attempt");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_sibling_giving_up_in_join_does_not_stop_another_siblings_retries() {
    // `a` gives up at about 21 ms, while `b`'s first attempt still runs.
    let a = Flaky::failing(u32::MAX);
    let b = Flaky::failing(2).slow(Duration::from_millis(100));
    joins_two(&a, &b).await.unwrap();
    assert_eq!(
        a.calls(),
        2,
        "the failing sibling made its own two attempts"
    );
    assert_eq!(b.calls(), 3, "the other sibling kept retrying to success");
}

async fn either(dep: &Flaky, fast: bool) -> Result<(), E> {
    if fast {
        gives_up_fast(dep).await
    } else {
        recovers_slowly(dep).await
    }
}

#[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 1)]
async fn fans_out(failing: &[Flaky], recovering: &[Flaky]) -> Result<u32, E> {
    let mut all = FuturesUnordered::new();
    for dep in failing {
        all.push(either(dep, true));
    }
    for dep in recovering {
        all.push(either(dep, false));
    }
    let mut ok = 0;
    while let Some(result) = all.next().await {
        ok += u32::from(result.is_ok());
    }
    Ok(ok)
}

#[tokio::test(start_paused = true)]
async fn siblings_in_futures_unordered_keep_their_own_retries() {
    let failing: Vec<Flaky> = (0..3).map(|_| Flaky::failing(u32::MAX)).collect();
    let recovering: Vec<Flaky> = (0..3)
        .map(|_| Flaky::failing(2).slow(Duration::from_millis(100)))
        .collect();
    assert_eq!(fans_out(&failing, &recovering).await.unwrap(), 3);
    assert!(recovering.iter().all(|d| d.calls() == 3));
    assert!(failing.iter().all(|d| d.calls() == 2));
}

async fn degrade(_dep: &Flaky, _error: E) -> Result<(), E> {
    Ok(())
}

#[resilient(retries = 1, idempotent, base_ms = 100, cap_ms = 100, fallback = degrade)]
async fn falls_back_late(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn gives_up_early(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn joins_fallback_and_give_up(a: &Flaky, b: &Flaky) -> Result<(), E> {
    // `b` gives up (4 failures, about 40 ms) before `a`'s fallback answers
    // (after about 120 ms): the fallback must not take back `b`'s give-up.
    let (ra, rb) = tokio::join!(falls_back_late(a), gives_up_early(b));
    ra?;
    rb
}

#[tokio::test(start_paused = true)]
async fn a_siblings_fallback_does_not_erase_another_siblings_give_up() {
    let a = Flaky::failing(u32::MAX);
    let b = Flaky::failing(u32::MAX);
    assert!(joins_fallback_and_give_up(&a, &b).await.is_err());
    assert_eq!(
        b.calls(),
        4,
        "the outer layer retried a failure a nested layer had given up on"
    );
}

// ---- A retry asks the budget of the dependency that failed ----

#[resilient(budget = "spent")]
async fn on_a_spent_budget(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(budget = "roomy")]
async fn on_a_roomy_budget(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn joins_two_budgets(failing: &Flaky, fine: &Flaky) -> Result<(), E> {
    // The failing call begins first; its sibling begins after it (so it
    // reports its budget last) and succeeds.
    let (failed, succeeded) = tokio::join!(on_a_roomy_budget(failing), on_a_spent_budget(fine));
    succeeded?;
    failed
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn joins_two_budgets_the_other_way(failing: &Flaky, fine: &Flaky) -> Result<(), E> {
    let (succeeded, failed) = tokio::join!(on_a_spent_budget(fine), on_a_roomy_budget(failing));
    succeeded?;
    failed
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn joins_one_budget(fine: &Flaky, failing: &Flaky) -> Result<(), E> {
    // Both on the spent budget: the succeeding call begins first and ends
    // last, after its sibling failed.
    let (succeeded, failed) = tokio::join!(on_a_spent_budget(fine), on_a_spent_budget(failing));
    succeeded?;
    failed
}

#[tokio::test(start_paused = true)]
async fn a_retry_asks_the_budget_of_the_call_that_failed_not_of_a_sibling_that_succeeded() {
    let registry = Registry::builder()
        // Refuses every retry: no ratio, no reserve.
        .budget(
            "spent",
            BudgetConfig::ratio(0.0001).min_retries_per_second(0),
        )
        // Allows them: the default reserve.
        .budget("roomy", BudgetConfig::default())
        .build()
        .unwrap();
    registry
        .scope(async {
            let failing = Flaky::failing(u32::MAX).slow(Duration::from_millis(20));
            let fine = Flaky::failing(0);
            assert!(joins_two_budgets(&failing, &fine).await.is_err());
            assert_eq!(
                failing.calls(),
                4,
                "the retries asked the succeeding sibling's spent budget"
            );
            let failing = Flaky::failing(u32::MAX).slow(Duration::from_millis(20));
            let fine = Flaky::failing(0);
            assert!(
                joins_two_budgets_the_other_way(&failing, &fine)
                    .await
                    .is_err()
            );
            assert_eq!(failing.calls(), 4);
            // A sibling on the same budget that succeeds later does not
            // take away the failed call's report: the retry is refused.
            let fine = Flaky::failing(0).slow(Duration::from_millis(20));
            let failing = Flaky::failing(u32::MAX);
            assert!(joins_one_budget(&fine, &failing).await.is_err());
            assert_eq!(
                failing.calls(),
                1,
                "retried without asking the spent budget"
            );
        })
        .await;
}

#[resilient]
async fn on_no_budget(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn joins_three(
    failing: &Flaky,
    fine: &Flaky,
    also_fine: &Flaky,
    swapped: bool,
) -> Result<(), E> {
    // The failed call's budget has room; one sibling that succeeds has the
    // spent budget, and reports before or after the other one.
    let (failed, a, b) = if swapped {
        tokio::join!(
            on_a_roomy_budget(failing),
            on_a_roomy_budget(also_fine),
            on_a_spent_budget(fine)
        )
    } else {
        tokio::join!(
            on_a_roomy_budget(failing),
            on_a_spent_budget(fine),
            on_a_roomy_budget(also_fine)
        )
    };
    a?;
    b?;
    failed
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn a_sibling_begins_after_the_failure(failing: &Flaky, fine: &Flaky) -> Result<(), E> {
    let later = async {
        tokio::time::sleep(Duration::from_millis(15)).await;
        on_a_spent_budget(fine).await
    };
    let (failed, succeeded) = tokio::join!(on_a_roomy_budget(failing), later);
    succeeded?;
    failed
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn selects_two(failing: &Flaky, slow: &Flaky) -> Result<(), E> {
    tokio::select! {
        biased;
        r = on_a_roomy_budget(failing) => r,
        r = on_a_spent_budget(slow) => r,
    }
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn both_succeed_then_fails(
    a: &Flaky,
    b: &Flaky,
    failing: &Flaky,
    joined: bool,
) -> Result<(), E> {
    if joined {
        let (ra, rb) = tokio::join!(on_a_spent_budget(a), on_a_roomy_budget(b));
        ra?;
        rb?;
    } else {
        on_a_spent_budget(a).await?;
        on_a_roomy_budget(b).await?;
    }
    on_no_budget(failing).await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn budgeted_then_own_failure(fine: &Flaky, failing: &Flaky) -> Result<(), E> {
    on_a_spent_budget(fine).await?;
    on_no_budget(failing).await
}

/// More orders, from a review of the first fix: three siblings, a sibling
/// dropped by `select!`, and a budgeted request that succeeded before the
/// attempt failed on its own (its retry resends that request, so asks its
/// budget, joined or in turn alike).
#[tokio::test(start_paused = true)]
async fn a_retry_asks_the_failed_calls_budget_in_every_order_of_siblings() {
    let registry = Registry::builder()
        .budget(
            "spent",
            BudgetConfig::ratio(0.0001).min_retries_per_second(0),
        )
        .budget("roomy", BudgetConfig::default())
        .build()
        .unwrap();
    registry
        .scope(async {
            for swapped in [false, true] {
                let failing = Flaky::failing(u32::MAX).slow(Duration::from_millis(20));
                let fine = Flaky::failing(0).slow(Duration::from_millis(10));
                let also_fine = Flaky::failing(0).slow(Duration::from_millis(15));
                assert!(
                    joins_three(&failing, &fine, &also_fine, swapped)
                        .await
                        .is_err()
                );
                assert_eq!(failing.calls(), 4, "three siblings, swapped: {swapped}");
            }
            // A sibling that begins (and reports its budget) after the
            // failure does not replace the failed call's budget.
            let failing = Flaky::failing(u32::MAX);
            let fine = Flaky::failing(0);
            assert!(
                a_sibling_begins_after_the_failure(&failing, &fine)
                    .await
                    .is_err()
            );
            assert_eq!(
                failing.calls(),
                4,
                "a later sibling's report replaced the failure's"
            );
            let failing = Flaky::failing(u32::MAX);
            let slow = Flaky::failing(0).slow(Duration::from_secs(1));
            assert!(selects_two(&failing, &slow).await.is_err());
            assert_eq!(failing.calls(), 4, "asked the budget of a dropped sibling");
            let mut attempts = Vec::new();
            for joined in [true, false] {
                let a = Flaky::failing(0);
                let b = Flaky::failing(0).slow(Duration::from_millis(20));
                let failing = Flaky::failing(u32::MAX);
                assert!(
                    both_succeed_then_fails(&a, &b, &failing, joined)
                        .await
                        .is_err()
                );
                attempts.push(failing.calls());
            }
            assert_eq!(attempts[0], attempts[1], "joined and in turn differ");
            let fine = Flaky::failing(0);
            let failing = Flaky::failing(u32::MAX);
            assert!(budgeted_then_own_failure(&fine, &failing).await.is_err());
            assert_eq!(fine.calls(), 1, "resent a request its spent budget refused");
        })
        .await;
}

// The failure a retry answers is the last one of a call the attempt saw
// fail: not a call whose fallback answered, not one a transparent frame
// held back until it ended, not one inside a sibling that was dropped.

#[resilient(budget = "spent", fallback = degrade)]
async fn on_a_spent_budget_with_a_fallback(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn beside_a_fallback(failing: &Flaky, degraded: &Flaky) -> Result<(), E> {
    // The sibling with a fallback fails after the failing call, and its
    // fallback answers: its caller saw no failure of it.
    let (failed, served) = tokio::join!(
        on_a_roomy_budget(failing),
        on_a_spent_budget_with_a_fallback(degraded)
    );
    served?;
    failed
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn beside_a_transparent_frame(
    failing: &Flaky,
    first: &Flaky,
    in_observe: bool,
) -> Result<(), E> {
    // `first` fails at 10 ms inside a frame that ends at 60 ms; the failing
    // call fails after it, at 20 ms: the last failure is the failing call's.
    let inner = async {
        let _ = on_a_spent_budget(first).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let framed = async {
        if in_observe {
            resilient::observe(inner).await;
        } else {
            resilient::with_deadline(Duration::from_secs(10), inner)
                .await
                .unwrap();
        }
    };
    let (failed, ()) = tokio::join!(on_a_roomy_budget(failing), framed);
    failed
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn failed_in_a_frame_then_a_sibling(
    failing: &Flaky,
    fine: &Flaky,
    in_observe: bool,
) -> Result<(), E> {
    // The failing call fails at 10 ms inside a frame; a sibling on the
    // spent budget begins after it, at 15 ms, and succeeds.
    let framed = async {
        if in_observe {
            resilient::observe(on_a_roomy_budget(failing)).await.0
        } else {
            resilient::with_deadline(Duration::from_secs(10), on_a_roomy_budget(failing))
                .await
                .unwrap()
        }
    };
    let later = async {
        tokio::time::sleep(Duration::from_millis(15)).await;
        on_a_spent_budget(fine).await
    };
    let (failed, succeeded) = tokio::join!(framed, later);
    succeeded?;
    failed
}

#[resilient(budget = "roomy", fallback = pass_the_error_on_unit)]
async fn on_a_roomy_budget_passing_the_error_on(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

async fn pass_the_error_on_unit(_dep: &Flaky, error: E) -> Result<(), E> {
    Err(error)
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn fallback_fails_then_a_sibling(failing: &Flaky, fine: &Flaky) -> Result<(), E> {
    // The fallback passes the failure on at 10 ms: the call failed its
    // caller after all. A sibling on the spent budget begins at 15 ms.
    let later = async {
        tokio::time::sleep(Duration::from_millis(15)).await;
        on_a_spent_budget(fine).await
    };
    let (failed, succeeded) = tokio::join!(on_a_roomy_budget_passing_the_error_on(failing), later);
    succeeded?;
    failed
}

#[resilient(deadline_ms = 60000)]
async fn fails_inside_then_hangs_lean(dep: &Flaky) -> Result<(), E> {
    let _ = on_a_spent_budget(dep).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[resilient(deadline_ms = 60000, bulkhead = "dep")]
async fn fails_inside_then_hangs_general(dep: &Flaky) -> Result<(), E> {
    let _ = on_a_spent_budget(dep).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn beside_a_dropped_call(failing: &Flaky, inner: &Flaky, general: bool) -> Result<(), E> {
    // Inside the sibling, a call fails at 10 ms; the failing call fails at
    // 20 ms; the sibling is dropped at 30 ms, not having failed itself.
    let dropped = async {
        let sibling = async {
            if general {
                fails_inside_then_hangs_general(inner).await
            } else {
                fails_inside_then_hangs_lean(inner).await
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(30), sibling).await;
    };
    let (failed, ()) = tokio::join!(on_a_roomy_budget(failing), dropped);
    failed
}

/// From two reviews of the budget's flag: a report went up as the failure
/// of a call whose fallback answered (and, in the first fix, a fallback
/// that passed the failure on did not report it), a transparent frame
/// passed its failure up only when it ended (over a later failure), and a
/// dropped call passed up a failure from inside it as its own. Each asked the spent budget,
/// and the failing call got one attempt instead of four.
#[tokio::test(start_paused = true)]
async fn a_retry_asks_the_last_failed_calls_budget_through_fallbacks_frames_and_drops() {
    let registry = Registry::builder()
        .budget(
            "spent",
            BudgetConfig::ratio(0.0001).min_retries_per_second(0),
        )
        .budget("roomy", BudgetConfig::default())
        .bulkhead("dep", BulkheadConfig::default())
        .build()
        .unwrap();
    registry
        .scope(async {
            let failing = Flaky::failing(u32::MAX);
            let degraded = Flaky::failing(u32::MAX).slow(Duration::from_millis(20));
            assert!(beside_a_fallback(&failing, &degraded).await.is_err());
            assert_eq!(failing.calls(), 4, "a served fallback counted as failed");
            let failing = Flaky::failing(u32::MAX);
            let fine = Flaky::failing(0);
            assert!(
                fallback_fails_then_a_sibling(&failing, &fine)
                    .await
                    .is_err()
            );
            assert_eq!(
                failing.calls(),
                4,
                "a fallback that passed the failure on counted as served"
            );
            for in_observe in [false, true] {
                let failing = Flaky::failing(u32::MAX).slow(Duration::from_millis(20));
                let first = Flaky::failing(u32::MAX);
                assert!(
                    beside_a_transparent_frame(&failing, &first, in_observe)
                        .await
                        .is_err()
                );
                assert_eq!(
                    failing.calls(),
                    4,
                    "an earlier failure in a frame won (observe: {in_observe})"
                );
            }
            for in_observe in [false, true] {
                let failing = Flaky::failing(u32::MAX);
                let fine = Flaky::failing(0);
                assert!(
                    failed_in_a_frame_then_a_sibling(&failing, &fine, in_observe)
                        .await
                        .is_err()
                );
                assert_eq!(
                    failing.calls(),
                    4,
                    "a failure in a frame lost to a later success (observe: {in_observe})"
                );
            }
            for general in [false, true] {
                let failing = Flaky::failing(u32::MAX).slow(Duration::from_millis(20));
                let inner = Flaky::failing(u32::MAX);
                assert!(
                    beside_a_dropped_call(&failing, &inner, general)
                        .await
                        .is_err()
                );
                assert_eq!(
                    failing.calls(),
                    4,
                    "a dropped call's inner failure won (general path: {general})"
                );
            }
        })
        .await;
}

// ---- A retry refused by one budget takes nothing from another ----

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1, budget = "spent")]
async fn outer_on_a_spent_budget(dep: &Flaky) -> Result<(), E> {
    on_a_roomy_budget(dep).await
}

#[tokio::test(start_paused = true)]
async fn a_retry_the_outer_budget_refuses_gives_the_nested_budgets_grant_back() {
    let registry = Registry::builder()
        .budget(
            "spent",
            BudgetConfig::ratio(0.0001).min_retries_per_second(0),
        )
        .budget("roomy", BudgetConfig::default())
        .build()
        .unwrap();
    registry
        .scope(async {
            let dep = Flaky::failing(u32::MAX);
            for _ in 0..10 {
                assert!(outer_on_a_spent_budget(&dep).await.is_err());
            }
            assert_eq!(dep.calls(), 10, "the spent budget refused every retry");
            let roomy = Registry::current().budget("roomy").unwrap().snapshot();
            assert_eq!(
                roomy.retries, 0,
                "retries never made were spent from the nested budget: {roomy:?}"
            );
            // Nor counted as granted: a grant given back never was.
            assert_eq!(roomy.granted, 0, "{roomy:?}");
        })
        .await;
}

// ---- A retry its caller never waited for takes nothing from a budget ----

#[resilient(budget = "inner")]
async fn on_the_inner_budget(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    backoff = "exponential",
    base_ms = 1000,
    cap_ms = 1000,
    budget = "outer"
)]
async fn backs_off_a_second(dep: &Flaky) -> Result<(), E> {
    on_the_inner_budget(dep).await
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_during_its_backoff_gives_its_retry_grants_back() {
    let registry = Registry::builder()
        .budget("inner", BudgetConfig::default())
        .budget("outer", BudgetConfig::default())
        .build()
        .unwrap();
    registry
        .scope(async {
            let dep = Flaky::failing(u32::MAX);
            for _ in 0..5 {
                // The caller's own timeout cuts each call during its backoff.
                let cut =
                    tokio::time::timeout(Duration::from_millis(100), backs_off_a_second(&dep))
                        .await;
                assert!(cut.is_err(), "the caller's timeout cut the call");
            }
            assert_eq!(dep.calls(), 5, "no call made its retry");
            for name in ["inner", "outer"] {
                let budget = Registry::current().budget(name).unwrap().snapshot();
                assert_eq!(
                    budget.retries, 0,
                    "retries never made were spent from {name}: {budget:?}"
                );
                // Nor counted as granted: a grant given back never was.
                assert_eq!(budget.granted, 0, "{budget:?}");
            }
            // A call whose backoff passes makes its retry, and spends it.
            let dep = Flaky::failing(1);
            backs_off_a_second(&dep).await.unwrap();
            assert_eq!(dep.calls(), 2);
            let outer = Registry::current().budget("outer").unwrap().snapshot();
            assert_eq!(outer.retries, 1, "{outer:?}");
            assert_eq!(outer.granted, 1, "the retry made is counted: {outer:?}");
        })
        .await;
}

// ---- A retry refused here takes nothing from its budget ----

#[resilient(
    retries = 3,
    idempotent,
    base_ms = 100,
    cap_ms = 100,
    breaker = "opens-at-two"
)]
async fn retried_into_an_opening_breaker(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

/// A retry granted, whose attempt the breaker (opened by the attempts
/// before it) then refuses, never went out: its grant goes back, and is
/// not counted as granted (review 34: `granted` and `retries` said 2 for
/// the one retry that reached the dependency).
#[tokio::test(start_paused = true)]
async fn a_retry_refused_by_the_breaker_gives_its_grant_back() {
    let registry = Registry::builder()
        .breaker(
            "opens-at-two",
            BreakerConfig::default()
                .sliding_window(resilient::SlidingWindow::CountBased { size: 2 })
                .minimum_number_of_calls(2),
        )
        .build()
        .unwrap();
    registry
        .scope(async {
            let dep = Flaky::failing(u32::MAX);
            match retried_into_an_opening_breaker(&dep).await {
                Err(E::Resilience(e)) => assert_eq!(e.kind(), ErrorKind::BreakerOpen),
                other => panic!("expected the breaker's refusal, got {other:?}"),
            }
            assert_eq!(dep.calls(), 2, "two attempts reached the dependency");
            let budget = Registry::current()
                .budget("opens-at-two")
                .unwrap()
                .snapshot();
            assert_eq!(
                (budget.granted, budget.retries),
                (1, 1),
                "one retry went out: {budget:?}"
            );
        })
        .await;
}

// ---- Calls refused locally earn no retry budget ----

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1, breaker = "dep")]
async fn budgeted(dep: &Flaky) -> Result<(), E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn calls_refused_by_an_open_breaker_earn_no_retry_budget() {
    let registry = Registry::builder()
        .breaker("dep", BreakerConfig::default())
        .budget(
            "dep",
            BudgetConfig::ratio(0.1)
                .window(Duration::from_secs(60))
                .min_retries_per_second(0),
        )
        .build()
        .unwrap();
    registry
        .scope(async {
            let dep = Flaky::failing(u32::MAX);
            let breaker = Registry::current().breaker("dep").unwrap();
            breaker.transition_to(State::ForcedOpen);
            for _ in 0..1000 {
                match budgeted(&dep).await {
                    Err(E::Resilience(e)) => assert_eq!(e.kind(), ErrorKind::BreakerOpen),
                    other => panic!("expected a refusal, got {other:?}"),
                }
            }
            assert_eq!(dep.calls(), 0);
            breaker.transition_to(State::Disabled);
            for _ in 0..20 {
                assert!(budgeted(&dep).await.is_err());
            }
            // 20 real requests earn 10 % of a retry each: 2 retries, not
            // the 60 that 1,000 refused calls used to pay for.
            assert!(
                dep.calls() <= 22,
                "{} attempts for 20 requests under a 10 % budget",
                dep.calls()
            );
        })
        .await;
}

// ---- An error is the function's, not the timer's ----

#[resilient(retries = 3, timeout_ms = 200, base_ms = 1, cap_ms = 1)]
async fn pay(key: &IdempotencyKey, runs: &AtomicU32) -> Result<(), E> {
    let _ = key;
    runs.fetch_add(1, Ordering::SeqCst);
    // The card is declined exactly as the attempt's timeout expires.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Err(E::Declined)
}

#[tokio::test(start_paused = true)]
async fn an_error_returned_at_the_timeouts_instant_keeps_its_own_classification() {
    let runs = AtomicU32::new(0);
    let key = IdempotencyKey::random();
    match pay(&key, &runs).await {
        Err(E::Declined) => {}
        other => panic!("expected the decline, got {other:?}"),
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a permanent error was retried"
    );
}

#[resilient(breaker = "cards", timeout_ms = 200)]
async fn pay_once(runs: &AtomicU32) -> Result<(), E> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Err(E::Declined)
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_at_the_timeouts_instant_is_not_a_breaker_failure() {
    let registry = Registry::builder()
        .breaker("cards", BreakerConfig::default().minimum_number_of_calls(5))
        .build()
        .unwrap();
    registry
        .scope(async {
            let runs = AtomicU32::new(0);
            for _ in 0..20 {
                assert!(matches!(pay_once(&runs).await, Err(E::Declined)));
            }
            assert_eq!(runs.load(Ordering::SeqCst), 20);
            let breaker = Registry::current().breaker("cards").unwrap();
            assert_eq!(breaker.state(), State::Closed);
        })
        .await;
}

// ---- Telling the caller when a failed call may have taken effect ----

#[resilient(retries = 2, timeout_ms = 100, base_ms = 1, cap_ms = 1)]
async fn charge_hangs(key: &IdempotencyKey) -> Result<(), std::io::Error> {
    let _ = key;
    std::future::pending::<()>().await;
    Ok(())
}

#[resilient(retries = 2, base_ms = 1, cap_ms = 1)]
async fn charge_with(key: &IdempotencyKey, kind: std::io::ErrorKind) -> Result<(), std::io::Error> {
    let _ = key;
    Err(std::io::Error::from(kind))
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_is_reported_as_possibly_applied() {
    let key = IdempotencyKey::random();
    let (result, report) = resilient::observe(charge_hangs(&key)).await;
    assert!(result.is_err());
    assert_eq!(report.attempts().len(), 3);
    assert!(
        report
            .attempts()
            .iter()
            .all(|a| a.outcome == AttemptOutcome::TimedOut)
    );
    assert!(report.may_have_taken_effect());
    assert!(report.gave_up());
    assert_eq!(report.retries(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_reported_as_certainly_not_applied() {
    let key = IdempotencyKey::random();
    let (result, report) =
        resilient::observe(charge_with(&key, std::io::ErrorKind::ConnectionRefused)).await;
    assert!(result.is_err());
    assert_eq!(report.attempts().len(), 3);
    assert!(!report.may_have_taken_effect());
    let (_, reset) =
        resilient::observe(charge_with(&key, std::io::ErrorKind::ConnectionReset)).await;
    assert!(reset.may_have_taken_effect());
}

#[tokio::test(start_paused = true)]
async fn a_success_is_reported_with_its_attempts_and_nothing_outside_observe() {
    let dep = Flaky::failing(1);
    let (result, report) = resilient::observe(recovers_slowly(&dep)).await;
    result.unwrap();
    let outcomes: Vec<_> = report.attempts().iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [
            AttemptOutcome::Failed(Classification::Transient),
            AttemptOutcome::Succeeded
        ]
    );
    assert!(report.attempts()[0].function.ends_with("::recovers_slowly"));
    assert!(!report.gave_up());
    assert!(!report.may_have_taken_effect());
}

// ---- Retry-After is bounded ----

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1000)]
async fn throttled_for(after: Duration, calls: &AtomicU32) -> Result<(), E> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(E::Throttled(after))
}

#[tokio::test(start_paused = true)]
async fn an_absurd_retry_after_ends_the_call_at_once_instead_of_parking_it() {
    for after in [
        Duration::from_secs(86_400 * 3),
        Duration::MAX,
        resilient::MAX_RETRY_AFTER + Duration::from_millis(1),
    ] {
        let calls = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        assert!(matches!(
            throttled_for(after, &calls).await,
            Err(E::Throttled(_))
        ));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{after:?}");
        assert_eq!(start.elapsed(), Duration::ZERO, "{after:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_within_the_maximum_is_waited_for() {
    let calls = AtomicU32::new(0);
    let start = tokio::time::Instant::now();
    let _ = throttled_for(Duration::from_secs(2), &calls).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert!(start.elapsed() >= Duration::from_secs(6));
}

// ---- Far deadlines ----

#[tokio::test(start_paused = true)]
async fn with_deadline_near_the_largest_instant_does_not_panic() {
    // The largest budget `Instant::now()` can be advanced by, to the
    // nanosecond, found by bisection: std does not name the largest
    // `Instant`.
    let now = tokio::time::Instant::now();
    let fits_in = |nanos: u128| {
        let d = Duration::new(
            u64::try_from(nanos / 1_000_000_000).unwrap(),
            u32::try_from(nanos % 1_000_000_000).unwrap(),
        );
        now.checked_add(d).map(|_| d)
    };
    let (mut fits, mut overflows) = (0u128, u128::from(u64::MAX) * 1_000_000_000);
    while overflows - fits > 1 {
        let mid = fits + (overflows - fits) / 2;
        if fits_in(mid).is_some() {
            fits = mid;
        } else {
            overflows = mid;
        }
    }
    let largest = fits_in(fits).unwrap();
    for budget in [
        largest,
        largest - Duration::from_micros(500),
        largest - Duration::from_secs(1),
        Duration::MAX,
    ] {
        let out = resilient::with_deadline(budget, async { 7 }).await;
        assert_eq!(out.unwrap(), 7, "{budget:?}");
        let slow = resilient::with_deadline(budget, async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            8
        })
        .await;
        assert_eq!(slow.unwrap(), 8, "{budget:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_annotated_call_under_a_far_deadline_runs() {
    let dep = Arc::new(Flaky::failing(1));
    let out = resilient::with_deadline(Duration::from_secs(86_400 * 365 * 200), async {
        recovers_slowly(&dep).await
    })
    .await;
    out.unwrap().unwrap();
}

// ---- Review findings: fallbacks, dropped attempts, own errors at a nested timeout ----

static PASS_THROUGH_HITS: AtomicU32 = AtomicU32::new(0);

async fn failing_dependency() -> Result<u32, E> {
    PASS_THROUGH_HITS.fetch_add(1, Ordering::SeqCst);
    Err(E::Unavailable)
}

async fn pass_the_error_on(error: E) -> Result<u32, E> {
    Err(error)
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1, fallback = pass_the_error_on)]
async fn with_pass_through_fallback() -> Result<u32, E> {
    failing_dependency().await
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn over_a_pass_through_fallback() -> Result<u32, E> {
    with_pass_through_fallback().await
}

/// Regression: a call with a fallback did not report its attempts, so an
/// enclosing layer retried a fallback that passed the error on, and the
/// dependency saw 4 + 3 + 2 + 1 = 10 attempts.
#[tokio::test(start_paused = true)]
async fn a_fallback_that_passes_the_error_on_does_not_multiply_attempts() {
    assert!(over_a_pass_through_fallback().await.is_err());
    assert_eq!(PASS_THROUGH_HITS.load(Ordering::SeqCst), 4);
}

/// Regression: an attempt dropped by the caller while it ran was missing
/// from the report, which then said nothing could have taken effect.
#[tokio::test(start_paused = true)]
async fn an_attempt_the_caller_drops_is_reported_as_possibly_applied() {
    let key = IdempotencyKey::random();
    let (result, report) = resilient::observe(async {
        tokio::time::timeout(Duration::from_millis(50), charge_hangs(&key)).await
    })
    .await;
    assert!(result.is_err(), "the caller's own timeout cut the call");
    assert_eq!(report.attempts().len(), 1);
    assert_eq!(report.attempts()[0].outcome, AttemptOutcome::Cancelled);
    assert!(report.may_have_taken_effect());
}

/// An argument whose copy for an attempt panics.
#[derive(Debug)]
struct PanicsOnClone;

impl Clone for PanicsOnClone {
    fn clone(&self) -> Self {
        panic!("this argument cannot be copied");
    }
}

#[resilient(retries = 2, idempotent)]
async fn clones_its_argument(arg: PanicsOnClone) -> Result<u32, E> {
    let _ = arg;
    Ok(1)
}

/// Making an attempt's future (the arguments' copies) can panic: the
/// report says the attempt may have been applied, as for any attempt cut
/// short, rather than nothing.
#[tokio::test(start_paused = true)]
async fn an_attempt_whose_arguments_panic_to_copy_is_reported_as_possibly_applied() {
    use futures_util::FutureExt;
    let (result, report) = resilient::observe(async {
        std::panic::AssertUnwindSafe(clones_its_argument(PanicsOnClone))
            .catch_unwind()
            .await
    })
    .await;
    assert!(result.is_err(), "the copy panicked");
    assert_eq!(report.attempts().len(), 1);
    assert_eq!(report.attempts()[0].outcome, AttemptOutcome::Cancelled);
    assert!(report.may_have_taken_effect());
}

#[resilient(deadline_ms = 60000)]
async fn lookup_that_hangs() -> Result<u32, E> {
    std::future::pending::<()>().await;
    Ok(1)
}

#[resilient(retries = 3, timeout_ms = 100, base_ms = 1, cap_ms = 1)]
async fn pay_after_a_lookup(key: &IdempotencyKey, runs: &AtomicU32) -> Result<u32, Own> {
    let _ = key;
    runs.fetch_add(1, Ordering::SeqCst);
    // Refused on this attempt's inherited deadline; the body then answers
    // with its own, permanent error at the same instant.
    let _ = lookup_that_hangs().await;
    Err(Own::Declined)
}

/// An error type that tells its refusals from its own errors.
#[derive(Debug)]
enum Own {
    Declined,
    #[allow(
        dead_code,
        reason = "carried for the caller; the test reads only the variant"
    )]
    Resilience(resilient::Error),
}

impl From<resilient::Error> for Own {
    fn from(e: resilient::Error) -> Self {
        Own::Resilience(e)
    }
}

impl From<E> for Own {
    fn from(e: E) -> Self {
        match e {
            E::Resilience(r) => Own::Resilience(r),
            _ => Own::Declined,
        }
    }
}

impl Classify for Own {
    fn classify(&self) -> Classification {
        Classification::Permanent
    }
    fn is_refusal(&self) -> Option<bool> {
        Some(matches!(self, Own::Resilience(_)))
    }
}

/// Regression: once a nested call had refused this attempt's deadline, any
/// error the body returned became `AttemptTimedOut` and was retried.
#[tokio::test(start_paused = true)]
async fn an_own_error_returned_after_a_nested_timeout_refusal_keeps_its_classification() {
    let runs = AtomicU32::new(0);
    let key = IdempotencyKey::random();
    match pay_after_a_lookup(&key, &runs).await {
        Err(Own::Declined) => {}
        other => panic!("expected the decline, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// ---- A call that neither retries nor keeps statistics still classifies ----

#[resilient(timeout_ms = 100)]
async fn reset_once() -> Result<(), std::io::Error> {
    Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
}

#[resilient(timeout_ms = 100, bulkhead = "dep")]
async fn reset_in_a_bulkhead() -> Result<(), std::io::Error> {
    Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
}

/// A function whose success borrows: its error type, spelled out, is still
/// probed (only a borrowing error type is not).
#[resilient(deadline_ms = 100)]
async fn reset_borrowing<'a>(text: &'a str) -> Result<&'a str, std::io::Error> {
    if text.is_empty() {
        return Ok(text);
    }
    Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
}

/// An error type that borrows, classified for every lifetime, behind an
/// alias: found too.
#[derive(Debug)]
enum Borrowing<'a> {
    Reset(#[allow(dead_code)] &'a str),
    Resilience(#[allow(dead_code)] resilient::Error),
}

impl From<resilient::Error> for Borrowing<'_> {
    fn from(e: resilient::Error) -> Self {
        Borrowing::Resilience(e)
    }
}

impl Classify for Borrowing<'_> {
    fn classify(&self) -> Classification {
        Classification::Transient
    }
    fn may_have_taken_effect(&self) -> bool {
        matches!(self, Borrowing::Reset(_))
    }
}

type BorrowingResult<'a, T> = Result<T, Borrowing<'a>>;

#[resilient(deadline_ms = 100)]
async fn reset_with_a_borrowing_error<'a>(text: &'a str) -> BorrowingResult<'a, ()> {
    Err(Borrowing::Reset(text))
}

/// An error that says it may have taken effect is reported so, whatever
/// the call's attribute: a function without retries, breaker or budget
/// (which needs no classification to run) still classifies its error when
/// the type can be classified, so `observe` tells the truth to the code
/// that reconciles. (Before, such calls reported every error as permanent
/// and certainly not applied.)
#[tokio::test(start_paused = true)]
async fn a_call_without_retries_or_statistics_reports_its_error_as_classified() {
    let registry = Registry::builder()
        .bulkhead("dep", BulkheadConfig::default())
        .build()
        .unwrap();
    registry
        .scope(async {
            for (result, report) in [
                resilient::observe(reset_once()).await,
                resilient::observe(reset_in_a_bulkhead()).await,
                resilient::observe(async { reset_borrowing("x").await.map(|_| ()) }).await,
                resilient::observe(async {
                    reset_with_a_borrowing_error("x")
                        .await
                        .map_err(|_| std::io::Error::other("borrowing"))
                })
                .await,
            ] {
                assert!(result.is_err());
                assert_eq!(report.attempts().len(), 1);
                assert_eq!(
                    report.attempts()[0].outcome,
                    AttemptOutcome::Failed(Classification::Transient)
                );
                assert!(report.may_have_taken_effect(), "{report:?}");
            }
        })
        .await;
}
