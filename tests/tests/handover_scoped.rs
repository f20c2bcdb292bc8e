//! The retry loop on a registry scoped around the task (every call handed
//! over before its first attempt), as `handover_global.rs` checks it on the
//! global registry (review 41, which found these holding).
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;

use resilient::{
    AttemptOutcome, BreakerConfig, BudgetConfig, BulkheadConfig, Classification, Classify,
    ErrorKind, Registry, SlidingWindow, resilient,
};
use tokio::time::Instant;

#[derive(Debug)]
pub enum E {
    Transient,
    Throttled(Duration),
    Permanent,
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
            E::Transient => Classification::Transient,
            E::Throttled(d) => Classification::Throttled {
                retry_after: Some(*d),
            },
            E::Permanent => Classification::Permanent,
            E::Refused(e) => e.classify(),
        }
    }
    fn is_refusal(&self) -> Option<bool> {
        Some(matches!(self, E::Refused(_)))
    }
}

#[derive(Debug)]
pub enum Step {
    Ok,
    Fail,
    Throttle(u64),
    Permanent,
    Hang,
    SleepOk(u64),
}

#[derive(Debug, Default)]
pub struct Dep {
    script: Mutex<VecDeque<Step>>,
    calls: AtomicU32,
    at: Mutex<Vec<Instant>>,
}
impl Dep {
    fn new(steps: Vec<Step>) -> Dep {
        Dep {
            script: Mutex::new(steps.into()),
            ..Default::default()
        }
    }
    async fn call(&self) -> Result<u32, E> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.at.lock().unwrap().push(Instant::now());
        let step = self.script.lock().unwrap().pop_front().unwrap_or(Step::Ok);
        match step {
            Step::Ok => Ok(n),
            Step::Fail => Err(E::Transient),
            Step::Throttle(ms) => Err(E::Throttled(Duration::from_millis(ms))),
            Step::Permanent => Err(E::Permanent),
            Step::Hang => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            Step::SleepOk(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(n)
            }
        }
    }
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
    fn gaps(&self) -> Vec<Duration> {
        let at = self.at.lock().unwrap();
        at.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

fn budget_only() -> BudgetConfig {
    // a ratio budget, 10 % plus a reserve of 100 (the default)
    BudgetConfig::ratio(0.1)
}

fn one_failure_opens() -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size: 1 })
        .minimum_number_of_calls(1)
        .wait_duration_in_open_state(Duration::from_secs(60))
}

// --- functions ---

#[resilient(
    retries = 3,
    idempotent,
    budget = "s-ok",
    backoff = "exponential",
    base_ms = 100
)]
async fn with_budget_ok(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    budget = "s-drop",
    backoff = "exponential",
    base_ms = 100
)]
async fn with_budget_drop(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    breaker = "s-open",
    budget = "s-open",
    backoff = "exponential",
    base_ms = 100
)]
async fn with_breaker_opens(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    bulkhead = "s-full",
    budget = "s-full",
    backoff = "exponential",
    base_ms = 100
)]
async fn with_bulkhead_full(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(bulkhead = "s-full")]
async fn hog(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, backoff = "exponential", base_ms = 100)]
async fn lean_retries(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    breaker = "s-plain",
    backoff = "exponential",
    base_ms = 100
)]
async fn parts_retries(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(budget = "s-inner")]
async fn inner(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    budget = "s-outer",
    backoff = "exponential",
    base_ms = 100
)]
async fn outer(dep: &Dep) -> Result<u32, E> {
    inner(dep).await
}

fn registry() -> Registry {
    Registry::builder()
        .budget("s-ok", budget_only())
        .budget("s-drop", budget_only())
        .budget("s-open", budget_only())
        .breaker("s-open", one_failure_opens())
        .budget("s-full", budget_only())
        .bulkhead("s-full", BulkheadConfig::default().max_concurrent(1))
        .budget("s-inner", budget_only())
        .budget("s-outer", budget_only())
        .build()
        .unwrap()
}

fn counts(reg: &Registry, name: &str) -> (u64, u64, u64, u64, u64) {
    let s = reg.budget(name).unwrap().snapshot();
    (s.requests, s.retries, s.granted, s.refused, s.remaining)
}

#[tokio::test(start_paused = true)]
async fn retries_that_succeed_count_their_grants() {
    let reg = registry();
    let dep = Dep::new(vec![Step::Fail, Step::Fail, Step::Ok]);
    let r = reg.scope(async { with_budget_ok(&dep).await }).await;
    assert_eq!(r.unwrap(), 3);
    assert_eq!(
        dep.gaps(),
        vec![Duration::from_millis(100), Duration::from_millis(200)]
    );
    assert_eq!(counts(&reg, "s-ok"), (1, 2, 2, 0, 98));
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_in_its_backoff_gives_the_grant_back() {
    let reg = registry();
    let dep = Dep::new(vec![Step::Fail]);
    let mut fut = Box::pin(reg.scope(async { with_budget_drop(&dep).await }));
    // First poll: the attempt fails at once, the call sleeps its backoff.
    let polled = poll_once(fut.as_mut()).await;
    assert!(polled.is_pending());
    assert_eq!(dep.calls(), 1);
    drop(fut);
    assert_eq!(counts(&reg, "s-drop"), (1, 0, 0, 0, 100));
}

#[tokio::test(start_paused = true)]
async fn a_retry_refused_by_a_breaker_that_opened_gives_the_grant_back() {
    let reg = registry();
    let dep = Dep::new(vec![Step::Fail]);
    let (r, report) = reg
        .scope(resilient::observe(async { with_breaker_opens(&dep).await }))
        .await;
    match r {
        Err(E::Refused(e)) => assert_eq!(e.kind(), ErrorKind::BreakerOpen),
        other => panic!("{other:?}"),
    }
    assert_eq!(dep.calls(), 1);
    assert_eq!(counts(&reg, "s-open"), (1, 0, 0, 0, 100));
    let outcomes: Vec<_> = report
        .attempts()
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (1, AttemptOutcome::Failed(Classification::Transient)),
            (2, AttemptOutcome::Refused(ErrorKind::BreakerOpen))
        ]
    );
    assert!(report.gave_up());
}

#[tokio::test(start_paused = true)]
async fn a_retry_refused_by_a_full_bulkhead_gives_the_grant_back() {
    let reg = registry();
    let dep = Dep::new(vec![Step::Fail]);
    let hog_dep = Dep::new(vec![Step::Hang]);
    reg.scope(async {
        let mut call = Box::pin(with_bulkhead_full(&dep));
        assert!(poll_once(call.as_mut()).await.is_pending());
        // The slot is free while it sleeps: another call takes it.
        let mut h = Box::pin(hog(&hog_dep));
        assert!(poll_once(h.as_mut()).await.is_pending());
        let r = call.await;
        match r {
            Err(E::Refused(e)) => assert_eq!(e.kind(), ErrorKind::BulkheadFull),
            other => panic!("{other:?}"),
        }
        drop(h);
    })
    .await;
    assert_eq!(counts(&reg, "s-full"), (1, 0, 0, 0, 100));
    assert_eq!(reg.bulkhead("s-full").unwrap().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn retry_after_floors_and_backoff_in_a_scope() {
    let reg = registry();
    let dep = Dep::new(vec![
        Step::Throttle(700),
        Step::Fail,
        Step::Throttle(50),
        Step::Ok,
    ]);
    let r = reg.scope(async { parts_retries(&dep).await }).await;
    assert_eq!(r.unwrap(), 4);
    assert_eq!(
        dep.gaps(),
        vec![
            Duration::from_millis(700),
            Duration::from_millis(200),
            Duration::from_millis(400)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_floors_and_backoff_lean() {
    let dep = Dep::new(vec![
        Step::Throttle(700),
        Step::Fail,
        Step::Throttle(50),
        Step::Ok,
    ]);
    let r = lean_retries(&dep).await;
    assert_eq!(r.unwrap(), 4);
    assert_eq!(
        dep.gaps(),
        vec![
            Duration::from_millis(700),
            Duration::from_millis(200),
            Duration::from_millis(400)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn retries_spent_lean_and_scoped() {
    let reg = registry();
    let dep = Dep::new(vec![
        Step::Fail,
        Step::Fail,
        Step::Fail,
        Step::Fail,
        Step::Fail,
    ]);
    let (r, report) = resilient::observe(lean_retries(&dep)).await;
    assert!(matches!(r, Err(E::Transient)));
    assert_eq!(dep.calls(), 4);
    assert_eq!(report.attempts().len(), 4);
    assert!(report.gave_up());
    let dep = Dep::new(vec![
        Step::Fail,
        Step::Fail,
        Step::Fail,
        Step::Fail,
        Step::Fail,
    ]);
    let (r, report) = reg.scope(resilient::observe(parts_retries(&dep))).await;
    assert!(matches!(r, Err(E::Transient)));
    assert_eq!(dep.calls(), 4);
    assert_eq!(report.attempts().len(), 4);
    assert!(report.gave_up());
}

#[tokio::test(start_paused = true)]
async fn nested_budgets() {
    let reg = registry();
    let dep = Dep::new(vec![Step::Fail, Step::Ok]);
    let (r, report) = reg.scope(resilient::observe(outer(&dep))).await;
    assert_eq!(r.unwrap(), 2);
    eprintln!("{report:?}");
    eprintln!("inner {:?}", counts(&reg, "s-inner"));
    eprintln!("outer {:?}", counts(&reg, "s-outer"));
    assert_eq!(counts(&reg, "s-inner"), (1, 1, 1, 0, 99));
    assert_eq!(counts(&reg, "s-outer"), (1, 1, 1, 0, 99));
}

/// Polls `fut` once.
pub async fn poll_once<F: Future + ?Sized>(mut fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

#[resilient(retries = 3, idempotent)]
async fn jittered(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}
#[resilient(retries = 3, idempotent, breaker = "s-jitter")]
async fn jittered_parts(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn seeded_full_jitter_schedule() {
    resilient::seed_jitter(42);
    let expected: Vec<Duration> =
        resilient::Backoff::full_jitter(Duration::from_millis(100), Duration::from_secs(30))
            .delays()
            .take(3)
            .collect();
    resilient::seed_jitter(42);
    let dep = Dep::new(vec![Step::Fail, Step::Fail, Step::Fail]);
    assert!(jittered(&dep).await.is_ok());
    // tokio's timer rounds a sleep up to the next millisecond
    let round = |d: Duration| Duration::from_millis(d.as_nanos().div_ceil(1_000_000) as u64);
    let exp: Vec<_> = expected.iter().map(|d| round(*d)).collect();
    assert_eq!(dep.gaps(), exp, "lean");
    resilient::seed_jitter(42);
    let reg = registry();
    let dep = Dep::new(vec![Step::Fail, Step::Fail, Step::Fail]);
    assert!(reg.scope(jittered_parts(&dep)).await.is_ok());
    assert_eq!(dep.gaps(), exp, "scoped");
}

#[resilient(
    retries = 2,
    idempotent,
    timeout_ms = 50,
    deadline_ms = 1000,
    backoff = "exponential",
    base_ms = 100
)]
async fn timed(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}
#[resilient(
    retries = 2,
    idempotent,
    timeout_ms = 50,
    deadline_ms = 1000,
    breaker = "s-timed",
    backoff = "exponential",
    base_ms = 100
)]
async fn timed_parts(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn timeouts_then_success() {
    for scoped in [false, true] {
        let dep = Dep::new(vec![Step::Hang, Step::SleepOk(10)]);
        let start = Instant::now();
        let (r, rep) = if scoped {
            registry()
                .scope(resilient::observe(timed_parts(&dep)))
                .await
        } else {
            resilient::observe(timed(&dep)).await
        };
        assert_eq!(r.unwrap(), 2);
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(160),
            "scoped {scoped}"
        );
        let o: Vec<_> = rep
            .attempts()
            .iter()
            .map(|a| (a.attempt, a.outcome, a.may_have_taken_effect))
            .collect();
        assert_eq!(
            o,
            vec![
                (1, AttemptOutcome::TimedOut, true),
                (2, AttemptOutcome::Succeeded, false)
            ]
        );
        assert!(!rep.gave_up());
    }
}

#[tokio::test(start_paused = true)]
async fn an_inherited_deadline_cuts_the_first_attempt() {
    let dep = Dep::new(vec![Step::Hang]);
    let start = Instant::now();
    let (r, rep) = resilient::observe(resilient::with_deadline(
        Duration::from_millis(30),
        lean_retries(&dep),
    ))
    .await;
    eprintln!("{r:?}");
    assert_eq!(start.elapsed(), Duration::from_millis(30));
    assert_eq!(dep.calls(), 1);
    eprintln!("{rep:?}");
}

#[resilient(
    retries = 3,
    idempotent,
    budget = "s-tokens",
    backoff = "exponential",
    base_ms = 100
)]
async fn tokens(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn token_bucket_grants() {
    let reg = Registry::builder()
        .budget("s-tokens", BudgetConfig::token_bucket(10, 0.1))
        .build()
        .unwrap();
    let dep = Dep::new(vec![Step::Fail, Step::Fail, Step::Ok]);
    assert_eq!(reg.scope(tokens(&dep)).await.unwrap(), 3);
    let s = reg.budget("s-tokens").unwrap().snapshot();
    assert_eq!((s.granted, s.refused, s.tokens), (2, 0, Some(8.1)));
    // dropped in backoff: not granted
    let dep = Dep::new(vec![Step::Fail]);
    let mut f = Box::pin(reg.scope(tokens(&dep)));
    assert!(poll_once(f.as_mut()).await.is_pending());
    drop(f);
    let s = reg.budget("s-tokens").unwrap().snapshot();
    assert_eq!((s.granted, s.refused), (2, 0));
}
