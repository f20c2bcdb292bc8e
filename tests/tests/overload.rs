//! Overload control through the attribute: bulkheads, retry budgets,
//! adaptive throttling and fallbacks, each with its own registry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilient::{
    BudgetConfig, BulkheadConfig, Classification, Classify, ErrorKind, Registry, ThrottleConfig,
    resilient,
};
use tokio::sync::Notify;

#[derive(Debug)]
enum E {
    Down,
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
            E::Down => Classification::Transient,
            E::Resilience(e) => e.classify(),
        }
    }
}

impl E {
    fn refusal(&self) -> Option<ErrorKind> {
        match self {
            E::Resilience(e) => Some(e.kind()),
            E::Down => None,
        }
    }
}

/// A dependency that fails while `down`, and can hold calls until released.
#[derive(Default)]
struct Dep {
    calls: AtomicU32,
    failures_left: AtomicU32,
    down: std::sync::atomic::AtomicBool,
    gate: Option<Arc<Notify>>,
}

impl Dep {
    fn down() -> Self {
        let d = Dep::default();
        d.down.store(true, Ordering::SeqCst);
        d
    }

    fn gated(gate: Arc<Notify>) -> Self {
        Dep {
            gate: Some(gate),
            ..Dep::default()
        }
    }

    async fn call(&self) -> Result<u32, E> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        tokio::task::yield_now().await;
        let scripted = self
            .failures_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if scripted || self.down.load(Ordering::SeqCst) {
            Err(E::Down)
        } else {
            Ok(n)
        }
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

fn one_slot() -> Registry {
    Registry::builder()
        .bulkhead("db", BulkheadConfig::default().max_concurrent(1))
        .build()
        .unwrap()
}

#[resilient(bulkhead = "db")]
async fn query(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_rejects_without_running_and_frees_the_slot_after() {
    let reg = one_slot();
    reg.scope(async {
        let gate = Arc::new(Notify::new());
        let held = Dep::gated(gate.clone());
        let other = Dep::default();
        let (first, second) = tokio::join!(query(&held), async {
            tokio::task::yield_now().await;
            let second = query(&other).await;
            gate.notify_one();
            second
        });
        first.unwrap();
        let err = second.unwrap_err();
        assert_eq!(err.refusal(), Some(ErrorKind::BulkheadFull));
        match &err {
            E::Resilience(e) => assert_eq!(e.name(), Some("db")),
            E::Down => unreachable!(),
        }
        assert_eq!(other.calls(), 0, "a rejected call is not run");
        // The first call returned its slot.
        query(&other).await.unwrap();
        assert_eq!(reg.bulkhead("db").unwrap().in_flight(), 0);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_gives_its_slot_back() {
    let reg = one_slot();
    reg.scope(async {
        let held = Dep::gated(Arc::new(Notify::new()));
        let cancelled = tokio::time::timeout(Duration::from_millis(10), query(&held)).await;
        assert!(cancelled.is_err());
        assert_eq!(reg.bulkhead("db").unwrap().in_flight(), 0);
        query(&Dep::default()).await.unwrap();
    })
    .await;
}

#[resilient(
    bulkhead = "db",
    retries = 1,
    idempotent,
    backoff = "exponential",
    base_ms = 1000
)]
async fn query_with_retry(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn the_slot_is_free_while_sleeping_between_attempts() {
    let reg = one_slot();
    reg.scope(async {
        let flaky = Dep::default();
        flaky.failures_left.store(1, Ordering::SeqCst);
        let other = Dep::default();
        let (retried, during_sleep) = tokio::join!(query_with_retry(&flaky), async {
            // The first attempt fails at once; its retry sleeps 1 s.
            tokio::time::sleep(Duration::from_millis(500)).await;
            query(&other).await
        });
        assert_eq!(retried.unwrap(), 2);
        during_sleep.expect("the sleeping call does not hold the slot");
    })
    .await;
}

#[resilient(bulkhead = "db")]
async fn query_waiting(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn max_wait_queues_a_call_until_a_slot_frees() {
    let reg = Registry::builder()
        .bulkhead(
            "db",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(1)),
        )
        .build()
        .unwrap();
    reg.scope(async {
        let gate = Arc::new(Notify::new());
        let held = Dep::gated(gate.clone());
        let other = Dep::default();
        let (first, second) = tokio::join!(query_waiting(&held), async {
            tokio::task::yield_now().await;
            let waiting = query_waiting(&other);
            let release = async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                gate.notify_one();
            };
            tokio::join!(waiting, release).0
        });
        first.unwrap();
        second.expect("the waiting call got the freed slot");
    })
    .await;
}

// Budgets: one layer, retries = 3, against a dependency that is down.
#[resilient(breaker = "search", retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn search(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

fn tolerant_breaker() -> resilient::BreakerConfig {
    // A breaker that never opens, to see the budget alone.
    resilient::BreakerConfig::default().initial_state(resilient::State::Disabled)
}

#[tokio::test(start_paused = true)]
async fn a_spent_retry_budget_returns_the_failure_at_once() {
    let reg = Registry::builder()
        .breaker("search", tolerant_breaker())
        .budget(
            "search",
            BudgetConfig::ratio(0.1)
                .window(Duration::from_secs(10))
                .min_retries_per_second(1),
        )
        .build()
        .unwrap();
    reg.scope(async {
        let dep = Dep::down();
        let requests = 1000;
        for _ in 0..requests {
            assert!(matches!(search(&dep).await, Err(E::Down)));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Without the budget: 4 attempts per request. With it: about one
        // retry per ten requests, plus the floor of 1 per second.
        let per_request = f64::from(dep.calls()) / f64::from(requests);
        assert!(per_request <= 1.15, "{per_request} attempts per request");
        assert!(
            per_request > 1.0,
            "the budget still lets some retries through"
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_token_bucket_budget_stops_retries_after_failures() {
    let reg = Registry::builder()
        .breaker("search", tolerant_breaker())
        .budget("search", BudgetConfig::token_bucket(10, 0.1))
        .build()
        .unwrap();
    reg.scope(async {
        let dep = Dep::down();
        // gRPC throttling: each failure costs a token, retries only while
        // tokens > 5. From 10 tokens: the first request's 4 failures leave 6,
        // the second's first failure leaves 5: no more retries at all.
        let _ = search(&dep).await;
        assert_eq!(dep.calls(), 4);
        let _ = search(&dep).await;
        assert_eq!(dep.calls(), 5);
        let _ = search(&dep).await;
        assert_eq!(dep.calls(), 6);
    })
    .await;
}

// Adaptive throttling of the dependency "search".
#[resilient(breaker = "search")]
async fn search_once(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn adaptive_throttling_sheds_calls_locally_when_the_backend_rejects_most() {
    resilient::seed_jitter(11);
    let reg = Registry::builder()
        .breaker("search", tolerant_breaker())
        .throttle("search", ThrottleConfig::default())
        .build()
        .unwrap();
    reg.scope(async {
        let dep = Dep::down();
        let mut shed = 0;
        let total = 2000;
        for _ in 0..total {
            match search_once(&dep).await {
                Err(e) if e.refusal() == Some(ErrorKind::LoadShed) => shed += 1,
                Err(E::Down) => {}
                other => panic!("{other:?}"),
            }
        }
        // Every call that reached the backend was rejected, so accepts = 0
        // and the shed probability tends to requests / (requests + 1) → 1.
        assert_eq!(dep.calls() + shed, total);
        assert!(shed > total * 9 / 10, "shed {shed} of {total}");
        assert!(dep.calls() > 0);
    })
    .await;
}

// Fallbacks.
#[resilient(retries = 2, idempotent, base_ms = 1, fallback = cached_price)]
async fn price(dep: &Dep, id: u32) -> Result<u32, E> {
    dep.call().await.map(|_| id)
}

async fn cached_price(_dep: &Dep, id: u32, error: E) -> Result<u32, E> {
    assert!(matches!(error, E::Down));
    Ok(id + 1000)
}

#[tokio::test(start_paused = true)]
async fn a_fallback_answers_when_the_call_finally_fails_and_is_counted() {
    let reg = Registry::builder().build().unwrap();
    reg.scope(async {
        let healthy = Dep::default();
        assert_eq!(price(&healthy, 7).await.unwrap(), 7);
        let dep = Dep::down();
        assert_eq!(price(&dep, 7).await.unwrap(), 1007);
        assert_eq!(dep.calls(), 3, "retries are spent before the fallback");
    })
    .await;
    let fallbacks = reg.snapshot().fallbacks;
    assert_eq!(fallbacks.len(), 1);
    assert!(fallbacks[0].function.ends_with("::price"), "{fallbacks:?}");
    assert_eq!(fallbacks[0].served, 1);
}

struct Prices {
    dep: Dep,
}

impl Prices {
    #[resilient(bulkhead = "db", fallback = Self::stale)]
    async fn get(&self, id: u32) -> Result<u32, E> {
        self.dep.call().await.map(|_| id)
    }

    async fn stale(&self, id: u32, error: E) -> Result<u32, E> {
        assert_eq!(error.refusal(), Some(ErrorKind::BulkheadFull));
        Ok(id + 1)
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_answered_by_the_fallback_too() {
    let reg = Registry::builder()
        .bulkhead("db", BulkheadConfig::default().max_concurrent(1))
        .build()
        .unwrap();
    reg.scope(async {
        let gate = Arc::new(Notify::new());
        let prices = Prices {
            dep: Dep::gated(gate.clone()),
        };
        let (first, second) = tokio::join!(prices.get(1), async {
            tokio::task::yield_now().await;
            let second = prices.get(2).await;
            gate.notify_one();
            second
        });
        assert_eq!(first.unwrap(), 1);
        assert_eq!(second.unwrap(), 3, "served by the fallback");
    })
    .await;
}

#[resilient(bulkhead = "db", timeout_ms = 500)]
async fn query_with_timeout(dep: &Dep) -> Result<u32, E> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_starts_after_the_wait_for_a_slot() {
    let reg = Registry::builder()
        .bulkhead(
            "db",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(1)),
        )
        .build()
        .unwrap();
    reg.scope(async {
        let gate = Arc::new(Notify::new());
        let held = Dep::gated(gate.clone());
        let other = Dep::default();
        let (first, second) = tokio::join!(query_waiting(&held), async {
            tokio::task::yield_now().await;
            let waiting = query_with_timeout(&other);
            let release = async {
                tokio::time::sleep(Duration::from_millis(400)).await;
                gate.notify_one();
            };
            tokio::join!(waiting, release).0
        });
        first.unwrap();
        // 400 ms waiting for the slot, then a 300 ms body: within its 500 ms.
        second.expect("the timeout counts from the body's start, not the wait's");
    })
    .await;
}

// Regression: calls the caller dropped used to count as requests the
// backend had not accepted, and pushed the throttle into shedding calls to
// a healthy backend.
#[resilient(breaker = "search")]
async fn slow_search() -> Result<u32, E> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn cancelled_calls_do_not_count_against_the_backend() {
    resilient::seed_jitter(3);
    let reg = Registry::builder()
        .breaker("search", tolerant_breaker())
        .throttle("search", ThrottleConfig::default())
        .build()
        .unwrap();
    reg.scope(async {
        for _ in 0..20 {
            let dropped = tokio::time::timeout(Duration::from_millis(1), slow_search()).await;
            assert!(dropped.is_err());
        }
        let throttle = reg.throttle("search").unwrap().snapshot();
        assert_eq!((throttle.requests, throttle.accepts), (0, 0));
        assert_eq!(throttle.rejection_probability, 0.0);
        assert_eq!(slow_search().await.unwrap(), 1, "not shed");
    })
    .await;
}

// Regression: time spent queueing for a bulkhead slot used to count as the
// dependency's call time, so a busy bulkhead opened the breaker on slow calls.
#[resilient(breaker = "queued", bulkhead = "queued")]
async fn ten_ms() -> Result<u32, E> {
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn waiting_for_a_bulkhead_slot_is_not_the_dependency_being_slow() {
    let reg = Registry::builder()
        .bulkhead(
            "queued",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(60)),
        )
        .breaker(
            "queued",
            resilient::BreakerConfig::default()
                .slow_call_duration_threshold(Duration::from_secs(1))
                .minimum_number_of_calls(10),
        )
        .build()
        .unwrap();
    reg.scope(async {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..200 {
            calls.spawn(resilient::propagate(ten_ms()));
        }
        while let Some(done) = calls.join_next().await {
            assert_eq!(done.unwrap().unwrap(), 1);
        }
        let breaker = reg.breaker("queued").unwrap().snapshot();
        assert_eq!(breaker.slow_calls, 0, "{breaker:?}");
        assert_eq!(breaker.state, resilient::State::Closed);
    })
    .await;
}
