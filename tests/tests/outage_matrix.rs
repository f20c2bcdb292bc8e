//! Outage shapes, uptime and panicking user code against the
//! breaker + retries + deadline/timeout + bulkhead + budget stack.
//!
//! Every test takes `SERIAL`, since `GracefulShutdown`'s in-flight count is
//! the process's.

// `serial()` is held across awaits on purpose: every test runs alone.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    missing_docs,
    clippy::await_holding_lock
)]

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;

use futures_util::FutureExt;
use resilient::{
    BreakerConfig, BudgetConfig, BulkheadConfig, Classification, Classify, ErrorKind,
    GracefulShutdown, Registry, SlidingWindow, State, ThrottleConfig, resilient,
};
use tokio::time::Instant;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    global_install();
    guard
}

static GLOBAL: Once = Once::new();

fn global_install() {
    GLOBAL.call_once(|| {
        let half_open_one = || {
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 2 })
                .minimum_number_of_calls(2)
                .wait_duration_in_open_state(Duration::from_secs(1))
                .permitted_number_of_calls_in_half_open_state(1)
        };
        Registry::builder()
            .breaker("g-body", half_open_one())
            .breaker("g-cls", half_open_one())
            .breaker("g-drop", half_open_one())
            .breaker("g-once", half_open_one())
            .bulkhead("g-body", BulkheadConfig::default().max_concurrent(1))
            .bulkhead("g-cls", BulkheadConfig::default().max_concurrent(1))
            .bulkhead("g-drop", BulkheadConfig::default().max_concurrent(1))
            .bulkhead("g-once", BulkheadConfig::default().max_concurrent(1))
            .build()
            .unwrap()
            .install()
            .unwrap();
        GracefulShutdown::install();
    });
}

fn in_flight() -> usize {
    GracefulShutdown::install().in_flight()
}

// ---------------------------------------------------------------- errors

#[derive(Debug)]
enum E {
    Down,
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
            E::Down => Classification::Transient,
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

fn kind<T: std::fmt::Debug>(r: &Result<T, E>) -> Option<ErrorKind> {
    match r {
        Err(E::Refused(e)) => Some(e.kind()),
        _ => None,
    }
}

// ---------------------------------------------------------------- the dependency

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ok,
    Fail,
    Throttle(u64),
    Hang,
    /// Sleeps this many ms, then answers Ok.
    Sleep(u64),
    Panic,
    Permanent,
    /// Sleeps this many ms, then panics.
    SleepPanic(u64),
}

#[derive(Debug)]
struct Dep {
    mode: Mutex<Mode>,
    runs: AtomicU32,
    /// Attempts that made their effect (counted at entry).
    started: Mutex<Vec<Instant>>,
}

impl Dep {
    fn new(mode: Mode) -> Arc<Dep> {
        Arc::new(Dep {
            mode: Mutex::new(mode),
            runs: AtomicU32::new(0),
            started: Mutex::new(Vec::new()),
        })
    }
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }
    async fn call(&self) -> Result<u32, E> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.started.lock().unwrap().push(Instant::now());
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Ok => Ok(1),
            Mode::Fail => {
                tokio::task::yield_now().await;
                Err(E::Down)
            }
            Mode::Throttle(ms) => Err(E::Throttled(Duration::from_millis(ms))),
            Mode::Hang => std::future::pending().await,
            Mode::Sleep(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(1)
            }
            Mode::Panic => panic!("the body panics"),
            Mode::Permanent => Err(E::Permanent),
            Mode::SleepPanic(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                panic!("the body panics late")
            }
        }
    }
}

// ---------------------------------------------------------------- global-registry functions (lean path)

#[resilient(breaker = "g-body", bulkhead = "g-body", timeout_ms = 500)]
async fn g_body(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

static CLASSIFY_PANICS: AtomicBool = AtomicBool::new(false);

fn panicky(e: &E) -> Classification {
    if CLASSIFY_PANICS.load(Ordering::SeqCst) {
        panic!("the classifier panics");
    }
    e.classify()
}

#[resilient(
    breaker = "g-cls",
    bulkhead = "g-cls",
    retries = 2,
    idempotent,
    base_ms = 10,
    classify = panicky
)]
async fn g_cls(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(breaker = "g-drop", bulkhead = "g-drop", timeout_ms = 5000)]
async fn g_drop(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    breaker = "g-once",
    bulkhead = "g-once",
    timeout_ms = 300,
    deadline_ms = 1000
)]
async fn g_once(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

// ---------------------------------------------------------------- scoped-registry functions

fn half_open_one() -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size: 2 })
        .minimum_number_of_calls(2)
        .wait_duration_in_open_state(Duration::from_secs(1))
        .permitted_number_of_calls_in_half_open_state(1)
}

fn scoped() -> Registry {
    Registry::builder()
        .breaker("s-br", half_open_one())
        .bulkhead("s-bh", BulkheadConfig::default().max_concurrent(1))
        .bulkhead(
            "s-bhw",
            BulkheadConfig::default()
                .max_concurrent(1)
                .max_wait(Duration::from_secs(1)),
        )
        .build()
        .unwrap()
}

#[resilient(breaker = "s-br", bulkhead = "s-bh", timeout_ms = 500)]
async fn s_body(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    breaker = "s-br",
    bulkhead = "s-bh",
    retries = 2,
    idempotent,
    base_ms = 10,
    classify = panicky
)]
async fn s_cls(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

async fn fb_panics(_dep: &Dep, _e: E) -> Result<u32, E> {
    panic!("the fallback panics")
}

#[resilient(breaker = "s-br", bulkhead = "s-bh", fallback = fb_panics)]
async fn s_fallback(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

/// An argument whose clone panics once `left` clones have been made.
#[derive(Debug)]
struct PanicClone {
    left: Arc<AtomicU32>,
}

impl Clone for PanicClone {
    fn clone(&self) -> Self {
        if self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err()
        {
            panic!("this clone panics");
        }
        PanicClone {
            left: Arc::clone(&self.left),
        }
    }
}

#[resilient(
    breaker = "s-br2",
    bulkhead = "s-bh",
    retries = 2,
    idempotent,
    base_ms = 10
)]
async fn s_clone(arg: PanicClone, dep: &Dep) -> Result<u32, E> {
    let _ = &arg;
    dep.call().await
}

#[resilient(breaker = "s-br", bulkhead = "s-bhw", timeout_ms = 5000)]
async fn s_wait(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

// ---------------------------------------------------------------- helpers

async fn open_then_wait(call: impl AsyncFn() -> Result<u32, E>, dep: &Dep, b: &resilient::Breaker) {
    dep.set(Mode::Fail);
    for _ in 0..2 {
        let _ = call().await;
    }
    assert_eq!(b.state(), State::Open, "two failures open it");
    tokio::time::advance(Duration::from_secs(1)).await;
}

fn bulkhead_in_flight(r: &Registry, name: &str) -> usize {
    r.bulkhead(name).unwrap().in_flight()
}

// ================================================================= 3. panics

/// A body that panics on the half-open probe (lean path, global registry):
/// the probe permit, the bulkhead slot and the in-flight count go back.
#[tokio::test(start_paused = true)]
async fn global_body_panics_on_the_probe_gives_everything_back() {
    let _g = serial();
    let r = Registry::global();
    let b = r.breaker("g-body").unwrap();
    let dep = Dep::new(Mode::Fail);
    open_then_wait(async || g_body(&dep).await, &dep, &b).await;
    dep.set(Mode::Panic);
    let d = dep.clone();
    let joined = tokio::spawn(async move { g_body(&d).await }).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(bulkhead_in_flight(r, "g-body"), 0, "slot back");
    assert_eq!(in_flight(), 0, "in-flight back");
    dep.set(Mode::Ok);
    let ok = g_body(&dep).await;
    assert!(ok.is_ok(), "the probe permit came back: {ok:?}");
    assert_eq!(b.state(), State::Closed);
}

/// The same through a scoped registry (the engine's loop).
#[tokio::test(start_paused = true)]
async fn scoped_body_panics_on_the_probe_gives_everything_back() {
    let _g = serial();
    let r = scoped();
    let b = r.breaker("s-br").unwrap();
    let dep = Dep::new(Mode::Fail);
    r.scope(open_then_wait(async || s_body(&dep).await, &dep, &b))
        .await;
    dep.set(Mode::Panic);
    let d = dep.clone();
    let joined = tokio::spawn(r.scope(async move { s_body(&d).await })).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(bulkhead_in_flight(&r, "s-bh"), 0, "slot back");
    assert_eq!(in_flight(), 0, "in-flight back");
    dep.set(Mode::Ok);
    let ok = r.scope(s_body(&dep)).await;
    assert!(ok.is_ok(), "the probe permit came back: {ok:?}");
    assert_eq!(b.state(), State::Closed);
}

/// A classifier that panics on the probe's failure (lean path).
#[tokio::test(start_paused = true)]
async fn global_classifier_panics_on_the_probe_gives_everything_back() {
    let _g = serial();
    let r = Registry::global();
    let b = r.breaker("g-cls").unwrap();
    let dep = Dep::new(Mode::Permanent);
    // Open it: two transient failures, each retried... use the breaker by hand.
    b.transition_to(State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    dep.set(Mode::Fail);
    CLASSIFY_PANICS.store(true, Ordering::SeqCst);
    let d = dep.clone();
    let joined = tokio::spawn(async move { g_cls(&d).await }).await;
    CLASSIFY_PANICS.store(false, Ordering::SeqCst);
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(dep.runs(), 1);
    assert_eq!(bulkhead_in_flight(r, "g-cls"), 0, "slot back");
    assert_eq!(in_flight(), 0, "in-flight back");
    dep.set(Mode::Ok);
    let ok = g_cls(&dep).await;
    assert!(ok.is_ok(), "the probe permit came back: {ok:?}");
    assert_eq!(b.state(), State::Closed);
}

/// A classifier that panics on the probe's failure (scoped: engine loop).
#[tokio::test(start_paused = true)]
async fn scoped_classifier_panics_on_the_probe_gives_everything_back() {
    let _g = serial();
    let r = scoped();
    let b = r.breaker("s-br").unwrap();
    let dep = Dep::new(Mode::Fail);
    b.transition_to(State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    CLASSIFY_PANICS.store(true, Ordering::SeqCst);
    let d = dep.clone();
    let joined = tokio::spawn(r.scope(async move { s_cls(&d).await })).await;
    CLASSIFY_PANICS.store(false, Ordering::SeqCst);
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(dep.runs(), 1);
    assert_eq!(bulkhead_in_flight(&r, "s-bh"), 0, "slot back");
    assert_eq!(in_flight(), 0, "in-flight back");
    dep.set(Mode::Ok);
    let ok = r.scope(s_cls(&dep)).await;
    assert!(ok.is_ok(), "the probe permit came back: {ok:?}");
    assert_eq!(b.state(), State::Closed);
}

/// A fallback that panics: nothing stays held, the next call runs.
#[tokio::test(start_paused = true)]
async fn fallback_panics_gives_everything_back() {
    let _g = serial();
    let r = scoped();
    let b = r.breaker("s-br").unwrap();
    let dep = Dep::new(Mode::Fail);
    for _ in 0..3 {
        let d = dep.clone();
        let joined = tokio::spawn(r.scope(async move { s_fallback(&d).await })).await;
        assert!(joined.unwrap_err().is_panic());
        assert_eq!(bulkhead_in_flight(&r, "s-bh"), 0, "slot back");
        assert_eq!(in_flight(), 0, "in-flight back");
    }
    // Two failures opened it; the third call was refused, then fell back (panicked).
    assert_eq!(dep.runs(), 2);
    assert_eq!(b.state(), State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    dep.set(Mode::Ok);
    assert!(r.scope(s_fallback(&dep)).await.is_ok());
    assert_eq!(b.state(), State::Closed);
    // A drain is not stuck on the panicked fallbacks.
    let shutdown = GracefulShutdown::install();
    let report = shutdown.drain(Duration::from_secs(1)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report:?}");
}

/// A panicking subscriber does not change calls, and stays subscribed; a
/// second subscriber still gets every event.
#[tokio::test(start_paused = true)]
async fn panicking_subscriber_changes_nothing() {
    let _g = serial();
    let r = scoped();
    let b = r.breaker("s-br").unwrap();
    let bad = r.subscribe(|_| panic!("the subscriber panics"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let good = r.subscribe(move |e| {
        if let resilient::BreakerEvent::StateTransition { .. } = e {
            s2.lock().unwrap().push(format!("{e:?}"));
        }
    });
    let dep = Dep::new(Mode::Fail);
    for round in 0..3 {
        dep.set(Mode::Fail);
        for _ in 0..2 {
            let _ = r.scope(s_body(&dep)).await;
        }
        assert_eq!(b.state(), State::Open, "round {round}");
        tokio::time::advance(Duration::from_secs(1)).await;
        dep.set(Mode::Ok);
        assert!(r.scope(s_body(&dep)).await.is_ok(), "round {round}");
        assert_eq!(b.state(), State::Closed, "round {round}");
    }
    assert!(bad.flush(Duration::from_secs(5)));
    assert!(good.flush(Duration::from_secs(5)));
    // closed->open, open->half-open, half-open->closed, three times.
    assert_eq!(seen.lock().unwrap().len(), 9, "{:?}", seen.lock().unwrap());
    assert_eq!(in_flight(), 0);
}

/// An argument whose clone panics for the retry, on a half-open breaker
/// with two probes: the probe permit taken for the retry goes back.
#[tokio::test(start_paused = true)]
async fn clone_panics_on_the_retry_gives_the_probe_back() {
    let _g = serial();
    let r = Registry::builder()
        .breaker(
            "s-br2",
            half_open_one()
                .permitted_number_of_calls_in_half_open_state(2)
                .failure_rate_threshold(60.0),
        )
        .bulkhead("s-bh", BulkheadConfig::default().max_concurrent(1))
        .build()
        .unwrap();
    let b = r.breaker("s-br2").unwrap();
    b.transition_to(State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    let dep = Dep::new(Mode::Fail);
    let left = Arc::new(AtomicU32::new(1)); // the first attempt's copy; the retry's panics
    let arg = PanicClone { left: left.clone() };
    let d = dep.clone();
    let joined = tokio::spawn(r.scope(async move { s_clone(arg, &d).await })).await;
    assert!(joined.unwrap_err().is_panic());
    let runs = dep.runs();
    assert_eq!(runs, 1, "{runs}");
    assert_eq!(bulkhead_in_flight(&r, "s-bh"), 0, "slot back");
    assert_eq!(in_flight(), 0, "in-flight back");
    // One probe failed (if the first attempt ran); one permit must remain.
    dep.set(Mode::Ok);
    left.store(100, Ordering::SeqCst);
    let arg = PanicClone { left: left.clone() };
    let ok = r.scope(s_clone(arg, &dep)).await;
    assert!(
        ok.is_ok(),
        "the second probe permit came back: {ok:?} {:?}",
        b.snapshot()
    );
    assert_eq!(b.state(), State::Closed, "{:?}", b.snapshot());
}

// ================================================================= 1. dropped mid-call

/// A caller's own timeout drops the half-open probe mid-attempt (lean
/// path): probe, slot and in-flight come back.
#[tokio::test(start_paused = true)]
async fn dropping_the_probe_mid_attempt_gives_everything_back() {
    let _g = serial();
    let r = Registry::global();
    let b = r.breaker("g-drop").unwrap();
    let dep = Dep::new(Mode::Fail);
    open_then_wait(async || g_drop(&dep).await, &dep, &b).await;
    dep.set(Mode::Hang);
    let cut = tokio::time::timeout(Duration::from_millis(100), g_drop(&dep)).await;
    assert!(cut.is_err());
    assert_eq!(bulkhead_in_flight(r, "g-drop"), 0);
    assert_eq!(in_flight(), 0);
    assert_eq!(b.state(), State::HalfOpen);
    dep.set(Mode::Ok);
    let ok = g_drop(&dep).await;
    assert!(ok.is_ok(), "{ok:?}");
    assert_eq!(b.state(), State::Closed);
}

/// A call waiting for a bulkhead slot is dropped by `select!`; the holder
/// finishes; nothing stays counted and a new call gets the slot.
#[tokio::test(start_paused = true)]
async fn dropping_a_call_waiting_for_a_slot_leaves_nothing_held() {
    let _g = serial();
    let r = scoped();
    let holder = Dep::new(Mode::Sleep(500));
    let waiter = Dep::new(Mode::Ok);
    r.scope(async {
        let h = holder.clone();
        let first = tokio::spawn(Registry::current().scope(async move { s_wait(&h).await }));
        tokio::task::yield_now().await;
        assert_eq!(bulkhead_in_flight(&r, "s-bhw"), 1);
        tokio::select! {
            _ = s_wait(&waiter) => panic!("no slot"),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        assert!(first.await.unwrap().is_ok());
    })
    .await;
    assert_eq!(waiter.runs(), 0);
    assert_eq!(bulkhead_in_flight(&r, "s-bhw"), 0);
    assert_eq!(in_flight(), 0);
    assert!(r.scope(s_wait(&waiter)).await.is_ok());
    assert_eq!(waiter.runs(), 1);
}

#[resilient(
    breaker = "s-bud",
    retries = 3,
    idempotent,
    backoff = "exponential",
    base_ms = 1000,
    cap_ms = 1000
)]
async fn s_backoff(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

/// Dropped during its backoff: no retry is counted as granted and nothing
/// is held.
#[tokio::test(start_paused = true)]
async fn dropping_during_backoff_spends_no_budget() {
    let _g = serial();
    let r = Registry::builder()
        .breaker(
            "s-bud",
            BreakerConfig::default().initial_state(State::Disabled),
        )
        .budget("s-bud", BudgetConfig::ratio(0.1).min_retries_per_second(1))
        .build()
        .unwrap();
    let dep = Dep::new(Mode::Fail);
    let before = r.budget("s-bud").unwrap().snapshot();
    let cut = r
        .scope(tokio::time::timeout(
            Duration::from_millis(500),
            s_backoff(&dep),
        ))
        .await;
    assert!(cut.is_err());
    assert_eq!(dep.runs(), 1);
    let after = r.budget("s-bud").unwrap().snapshot();
    assert_eq!(after.granted, before.granted);
    assert_eq!(after.remaining, before.remaining, "{before:?} {after:?}");
    assert_eq!(in_flight(), 0);
}

// ================================================================= 4. non-idempotent

/// A non-idempotent call runs its body once in every shape, on both paths,
/// and under `observe`.
#[tokio::test(start_paused = true)]
async fn non_idempotent_runs_once_in_every_shape() {
    let _g = serial();
    let shapes = [
        Mode::Fail,
        Mode::Throttle(100),
        Mode::Hang,
        Mode::Sleep(299),
        Mode::Sleep(301),
        Mode::Permanent,
        Mode::Ok,
    ];
    let r = scoped();
    for shape in shapes {
        let b = Registry::global().breaker("g-once").unwrap();
        b.reset();
        let dep = Dep::new(shape);
        let _ = g_once(&dep).await;
        assert_eq!(dep.runs(), 1, "global {shape:?}");
        let dep = Dep::new(shape);
        let (_res, report) = resilient::observe(g_once(&dep)).await;
        assert_eq!(dep.runs(), 1, "global observed {shape:?}");
        assert!(report.attempts().len() <= 1, "{shape:?} {report:?}");
        r.breaker("s-br").unwrap().reset();
        let dep = Dep::new(shape);
        let _ = r.scope(s_body(&dep)).await;
        assert_eq!(dep.runs(), 1, "scoped {shape:?}");
        let dep = Dep::new(shape);
        let _ = r.scope(s_wait(&dep)).await;
        assert_eq!(dep.runs(), 1, "scoped waiting {shape:?}");
    }
    assert_eq!(in_flight(), 0);
}

// ================================================================= 1. nested stack, every shape

#[resilient(
    retries = 3,
    idempotent,
    timeout_ms = 300,
    breaker = "n-dep",
    bulkhead = "n-bh",
    base_ms = 20
)]
async fn n_inner(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}
#[resilient(retries = 3, idempotent, timeout_ms = 800, base_ms = 20)]
async fn n_mid(dep: &Dep) -> Result<u32, E> {
    n_inner(dep).await
}
#[resilient(
    retries = 3,
    idempotent,
    timeout_ms = 2000,
    deadline_ms = 3000,
    base_ms = 20
)]
async fn n_outer(dep: &Dep) -> Result<u32, E> {
    n_mid(dep).await
}

const DEADLINE: Duration = Duration::from_millis(3000);

fn nested_registry(breaker: BreakerConfig, budget: BudgetConfig) -> Registry {
    Registry::builder()
        .breaker("n-dep", breaker)
        .budget("n-dep", budget)
        .bulkhead("n-bh", BulkheadConfig::default().max_concurrent(2))
        .build()
        .unwrap()
}

const SHAPES: [Mode; 9] = [
    Mode::Fail,
    Mode::Hang,
    Mode::Sleep(299),
    Mode::Sleep(300),
    Mode::Sleep(301),
    Mode::Throttle(100),
    Mode::Throttle(900),
    Mode::Throttle(5000),
    Mode::Permanent,
];

/// Per request: at most 4 attempts, never past the deadline, nothing held
/// after; Retry-After obeyed between attempts.
#[tokio::test(start_paused = true)]
async fn nested_layers_in_every_shape_do_not_multiply_or_overrun() {
    let _g = serial();
    resilient::seed_jitter(3);
    for shape in SHAPES {
        let r = nested_registry(
            BreakerConfig::default().initial_state(State::Disabled),
            BudgetConfig::ratio(0.1).min_retries_per_second(1000),
        );
        for request in 0..5 {
            let dep = Dep::new(shape);
            let start = Instant::now();
            let res = r.scope(n_outer(&dep)).await;
            let took = start.elapsed();
            assert!(took <= DEADLINE, "{shape:?} #{request}: took {took:?}");
            assert!(
                dep.runs() <= 4,
                "{shape:?} #{request}: {} attempts",
                dep.runs()
            );
            if let Mode::Throttle(ms) = shape {
                let started = dep.started.lock().unwrap();
                for w in started.windows(2) {
                    assert!(
                        w[1] - w[0] >= Duration::from_millis(ms),
                        "{shape:?}: retried after {:?}",
                        w[1] - w[0]
                    );
                }
            }
            if matches!(shape, Mode::Sleep(299)) {
                assert!(res.is_ok(), "{shape:?} {res:?}");
            }
            assert_eq!(bulkhead_in_flight(&r, "n-bh"), 0, "{shape:?}");
            assert_eq!(in_flight(), 0, "{shape:?}");
        }
    }
}

/// The same with a 10 % budget and no floor: over 100 requests, retries
/// stay within the budget in every shape.
#[tokio::test(start_paused = true)]
async fn nested_layers_retries_stay_within_the_budget() {
    let _g = serial();
    resilient::seed_jitter(4);
    for shape in [Mode::Fail, Mode::Hang, Mode::Sleep(301), Mode::Throttle(50)] {
        let r = nested_registry(
            BreakerConfig::default().initial_state(State::Disabled),
            BudgetConfig::ratio(0.1)
                .window(Duration::from_secs(3600))
                .min_retries_per_second(0),
        );
        let dep = Dep::new(shape);
        for _ in 0..100 {
            let _ = r.scope(n_outer(&dep)).await;
        }
        let snap = r.budget("n-dep").unwrap().snapshot();
        let runs = dep.runs();
        assert!(
            runs <= 110,
            "{shape:?}: {runs} attempts for 100 requests, {snap:?}"
        );
        assert_eq!(u64::from(runs) - 100, snap.granted, "{shape:?}: {snap:?}");
        assert_eq!(in_flight(), 0);
    }
}

/// The breaker over the nested stack: opens on the window's verdict, refuses
/// every layer's retries, half-opens after its wait and closes on probes.
#[tokio::test(start_paused = true)]
async fn nested_layers_breaker_opens_half_opens_and_closes_in_every_shape() {
    let _g = serial();
    resilient::seed_jitter(5);
    for shape in [Mode::Fail, Mode::Hang, Mode::Sleep(301), Mode::Throttle(50)] {
        let r = nested_registry(
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 4 })
                .minimum_number_of_calls(4)
                .wait_duration_in_open_state(Duration::from_secs(10))
                .permitted_number_of_calls_in_half_open_state(2),
            BudgetConfig::ratio(0.1).min_retries_per_second(1000),
        );
        let b = r.breaker("n-dep").unwrap();
        let dep = Dep::new(shape);
        let _ = r.scope(n_outer(&dep)).await;
        assert_eq!(dep.runs(), 4, "{shape:?}: four attempts open it");
        assert_eq!(b.state(), State::Open, "{shape:?}");
        let res = r.scope(n_outer(&dep)).await;
        assert_eq!(
            kind(&res),
            Some(ErrorKind::BreakerOpen),
            "{shape:?} {res:?}"
        );
        assert_eq!(dep.runs(), 4, "{shape:?}");
        tokio::time::advance(Duration::from_secs(10)).await;
        dep.set(Mode::Ok);
        for _ in 0..2 {
            assert!(r.scope(n_outer(&dep)).await.is_ok(), "{shape:?}");
        }
        assert_eq!(b.state(), State::Closed, "{shape:?}");
        assert_eq!(bulkhead_in_flight(&r, "n-bh"), 0, "{shape:?}");
        assert_eq!(in_flight(), 0);
    }
}

/// Cut from outside at many instants (during the inner attempt, backoffs
/// and Retry-After waits of every layer): nothing stays held, and the
/// half-open probes are all given back.
#[tokio::test(start_paused = true)]
async fn nested_layers_cut_at_any_instant_give_everything_back() {
    let _g = serial();
    resilient::seed_jitter(6);
    for shape in [
        Mode::Fail,
        Mode::Hang,
        Mode::Sleep(301),
        Mode::Throttle(100),
    ] {
        for cut_ms in [
            1u64, 5, 50, 150, 299, 300, 301, 320, 450, 799, 800, 801, 1500,
        ] {
            let r = nested_registry(
                BreakerConfig::default()
                    .sliding_window(SlidingWindow::CountBased { size: 4 })
                    .minimum_number_of_calls(4)
                    .permitted_number_of_calls_in_half_open_state(1)
                    .wait_duration_in_open_state(Duration::from_secs(1)),
                BudgetConfig::ratio(0.1).min_retries_per_second(1000),
            );
            let b = r.breaker("n-dep").unwrap();
            b.transition_to(State::Open);
            tokio::time::advance(Duration::from_secs(1)).await;
            let dep = Dep::new(shape);
            let cut = r
                .scope(tokio::time::timeout(
                    Duration::from_millis(cut_ms),
                    n_outer(&dep),
                ))
                .await;
            let what = format!("{shape:?} cut at {cut_ms} ms: {cut:?}");
            assert_eq!(bulkhead_in_flight(&r, "n-bh"), 0, "{what}");
            assert_eq!(in_flight(), 0, "{what}");
            if b.state() == State::HalfOpen {
                dep.set(Mode::Ok);
                let ok = r.scope(n_outer(&dep)).await;
                assert!(ok.is_ok(), "{what}: then {ok:?}");
                assert_eq!(b.state(), State::Closed, "{what}");
            }
        }
    }
}

// ================================================================= 2. uptime

#[resilient(breaker = "u-br", timeout_ms = 5000)]
async fn u_count(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}
#[resilient(breaker = "u-tb")]
async fn u_time(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}
#[resilient(budget = "u-bud", retries = 1, idempotent, base_ms = 1)]
async fn u_budget(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}
#[resilient(breaker = "u-th")]
async fn u_throttle(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

fn uptime_registry() -> Registry {
    Registry::builder()
        .breaker(
            "u-br",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 4 })
                .minimum_number_of_calls(4)
                .wait_duration_in_open_state(Duration::from_secs(1))
                .permitted_number_of_calls_in_half_open_state(2)
                .slow_call_duration_threshold(Duration::from_millis(200))
                .slow_call_rate_threshold(50.0),
        )
        .breaker(
            "u-tb",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::TimeBased { seconds: 5 })
                .minimum_number_of_calls(3)
                .wait_duration_in_open_state(Duration::from_secs(2))
                .permitted_number_of_calls_in_half_open_state(1),
        )
        .budget(
            "u-bud",
            BudgetConfig::ratio(0.1)
                .window(Duration::from_secs(10))
                .min_retries_per_second(0),
        )
        .breaker(
            "u-th",
            BreakerConfig::default().initial_state(State::Disabled),
        )
        .budget("u-th", BudgetConfig::ratio(0.1))
        .throttle(
            "u-th",
            ThrottleConfig::default().window(Duration::from_secs(60)),
        )
        .build()
        .unwrap()
}

async fn uptime_scenario(r: &Registry) -> Vec<String> {
    resilient::seed_jitter(42);
    let mut t = Vec::new();
    let t0 = Instant::now();
    let br = r.breaker("u-br").unwrap();
    let tb = r.breaker("u-tb").unwrap();
    let dep = Dep::new(Mode::Ok);
    // Count window: quick successes are not slow, on any clock.
    for _ in 0..4 {
        let _ = r.scope(u_count(&dep)).await;
    }
    t.push(format!("ok x4: {:?}", br.snapshot()));
    dep.set(Mode::Sleep(200));
    for _ in 0..4 {
        let _ = r.scope(u_count(&dep)).await;
    }
    t.push(format!("200ms x4: {:?}", br.snapshot()));
    dep.set(Mode::Sleep(201));
    for _ in 0..2 {
        let _ = r.scope(u_count(&dep)).await;
    }
    t.push(format!("201ms x2: {:?}", br.snapshot()));
    // Open now (2 slow of 4 = 50 %): exact wait.
    let refused = r.scope(u_count(&dep)).await;
    t.push(format!(
        "refused: {:?} {:?}",
        kind(&refused),
        match &refused {
            Err(E::Refused(e)) => e.retry_in(),
            _ => None,
        }
    ));
    tokio::time::advance(Duration::from_millis(999)).await;
    let refused = r.scope(u_count(&dep)).await;
    t.push(format!("at 999ms: {:?}", kind(&refused)));
    tokio::time::advance(Duration::from_millis(1)).await;
    dep.set(Mode::Ok);
    for _ in 0..2 {
        let ok = r.scope(u_count(&dep)).await;
        t.push(format!("probe: {:?}", ok.is_ok()));
    }
    t.push(format!("after probes: {:?}", br.snapshot()));
    // Failures open it.
    dep.set(Mode::Fail);
    for _ in 0..4 {
        let _ = r.scope(u_count(&dep)).await;
    }
    t.push(format!("fail x4: {:?}", br.snapshot()));
    // Time window: failures 2 s apart; 3 in 5 s open it.
    for i in 0..3 {
        let _ = r.scope(u_time(&dep)).await;
        t.push(format!("tb fail {i}: {:?}", tb.snapshot()));
        tokio::time::advance(Duration::from_secs(2)).await;
    }
    // ... but failures 3 s apart never do.
    tb.reset();
    tokio::time::advance(Duration::from_secs(10)).await;
    for i in 0..4 {
        let _ = r.scope(u_time(&dep)).await;
        t.push(format!("tb spaced {i}: {:?}", tb.snapshot()));
        tokio::time::advance(Duration::from_millis(2600)).await;
    }
    // Budget: 50 failing requests, 10 % of them retried.
    let bud_dep = Dep::new(Mode::Fail);
    for _ in 0..50 {
        let _ = r.scope(u_budget(&bud_dep)).await;
        tokio::time::advance(Duration::from_millis(20)).await;
    }
    let bs = r.budget("u-bud").unwrap().snapshot();
    t.push(format!(
        "budget: runs {} requests {} retries {} remaining {}",
        bud_dep.runs(),
        bs.requests,
        bs.retries,
        bs.remaining
    ));
    // Throttle: a dependency refusing everything gets shed.
    let th_dep = Dep::new(Mode::Fail);
    let mut shed = 0;
    for _ in 0..100 {
        if kind(&r.scope(u_throttle(&th_dep)).await) == Some(ErrorKind::LoadShed) {
            shed += 1;
        }
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    let ts = r.throttle("u-th").unwrap().snapshot();
    t.push(format!(
        "throttle: shed {shed} runs {} requests {} accepts {} p {:.3}",
        th_dep.runs(),
        ts.requests,
        ts.accepts,
        ts.rejection_probability
    ));
    t.push(format!("took {:?}", t0.elapsed()));
    // Leave everything as found.
    br.reset();
    tb.reset();
    tokio::time::advance(Duration::from_secs(600)).await;
    t
}

async fn uptime_check(offset: Duration) {
    let long_lived = uptime_registry();
    let day0_fresh = uptime_scenario(&uptime_registry()).await;
    let day0_long = uptime_scenario(&long_lived).await;
    assert_eq!(day0_fresh, day0_long, "day 0: a fresh and a used registry");
    tokio::time::advance(offset).await;
    let later_long = uptime_scenario(&long_lived).await;
    let later_fresh = uptime_scenario(&uptime_registry()).await;
    for (i, (a, b)) in day0_fresh.iter().zip(&later_long).enumerate() {
        assert_eq!(a, b, "line {i}, registry made on day 0, after {offset:?}");
    }
    for (i, (a, b)) in day0_fresh.iter().zip(&later_fresh).enumerate() {
        assert_eq!(a, b, "line {i}, registry made after {offset:?}");
    }
    eprintln!("{day0_fresh:#?}");
}

#[tokio::test(start_paused = true)]
async fn uptime_25_days() {
    let _g = serial();
    uptime_check(Duration::from_secs(25 * 86_400)).await;
}

#[tokio::test(start_paused = true)]
async fn uptime_2_pow_32_ms() {
    let _g = serial();
    uptime_check(Duration::from_millis(1 << 32)).await;
}

#[tokio::test(start_paused = true)]
async fn uptime_400_days() {
    let _g = serial();
    uptime_check(Duration::from_secs(400 * 86_400)).await;
}

/// The nested stack's promises after a long uptime too.
#[tokio::test(start_paused = true)]
async fn nested_layers_after_400_days() {
    let _g = serial();
    tokio::time::advance(Duration::from_secs(400 * 86_400)).await;
    resilient::seed_jitter(3);
    for shape in SHAPES {
        let r = nested_registry(
            BreakerConfig::default().initial_state(State::Disabled),
            BudgetConfig::ratio(0.1).min_retries_per_second(1000),
        );
        let dep = Dep::new(shape);
        let start = Instant::now();
        let _ = r.scope(n_outer(&dep)).await;
        assert!(start.elapsed() <= DEADLINE, "{shape:?}");
        assert!(dep.runs() <= 4, "{shape:?}: {}", dep.runs());
        assert_eq!(in_flight(), 0);
    }
}

// ================================================================= 3b. panics caught in the same task

#[resilient(deadline_ms = 100)]
async fn deadline_body(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(retries = 3, idempotent, base_ms = 1)]
async fn retrying(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(
    retries = 3,
    idempotent,
    base_ms = 1,
    deadline_ms = 5000,
    timeout_ms = 1000
)]
async fn outer_of_panicking(dep: &Dep) -> Result<u32, E> {
    deadline_body(dep).await
}

/// What a fresh call sees after a panic was caught in this task.
async fn fresh_state_check(what: &str) {
    assert_eq!(
        resilient::current_deadline(),
        None,
        "{what}: a deadline left behind"
    );
    assert_eq!(resilient::remaining(), None, "{what}");
    assert_eq!(in_flight(), 0, "{what}: in flight");
    let dep = Dep::new(Mode::Fail);
    let start = Instant::now();
    let _ = retrying(&dep).await;
    assert_eq!(dep.runs(), 4, "{what}: the next call retries as usual");
    assert!(start.elapsed() < Duration::from_secs(1), "{what}");
    let dep = Dep::new(Mode::Fail);
    let (_r, report) = resilient::observe(retrying(&dep)).await;
    assert_eq!(report.attempts().len(), 4, "{what}: {report:?}");
    let dep = Dep::new(Mode::Hang);
    let start = Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(10), deadline_body(&dep)).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(100),
        "{what}: own deadline"
    );
    assert_eq!(in_flight(), 0, "{what}: in flight");
}

#[tokio::test(start_paused = true)]
async fn a_panic_caught_in_the_same_task_leaves_nothing_behind() {
    let _g = serial();
    let dep = Dep::new(Mode::Panic);
    let caught = AssertUnwindSafe(deadline_body(&dep)).catch_unwind().await;
    assert!(caught.is_err());
    fresh_state_check("plain").await;

    let caught = AssertUnwindSafe(outer_of_panicking(&dep))
        .catch_unwind()
        .await;
    assert!(caught.is_err());
    fresh_state_check("nested").await;

    let caught = AssertUnwindSafe(resilient::observe(outer_of_panicking(&dep)))
        .catch_unwind()
        .await;
    assert!(caught.is_err());
    fresh_state_check("observed").await;

    let r = scoped();
    let caught = AssertUnwindSafe(r.scope(outer_of_panicking(&dep)))
        .catch_unwind()
        .await;
    assert!(caught.is_err());
    assert!(
        Registry::current().same_as(Registry::global()),
        "scope left behind"
    );
    fresh_state_check("scoped").await;

    let caught = AssertUnwindSafe(resilient::with_deadline(
        Duration::from_millis(50),
        outer_of_panicking(&dep),
    ))
    .catch_unwind()
    .await;
    assert!(caught.is_err());
    fresh_state_check("with_deadline").await;

    let caught = AssertUnwindSafe(resilient::admitted(outer_of_panicking(&dep)))
        .catch_unwind()
        .await;
    assert!(caught.is_err());
    fresh_state_check("admitted").await;

    CLASSIFY_PANICS.store(true, Ordering::SeqCst);
    let d = Dep::new(Mode::Fail);
    let caught = AssertUnwindSafe(g_cls(&d)).catch_unwind().await;
    CLASSIFY_PANICS.store(false, Ordering::SeqCst);
    assert!(caught.is_err());
    fresh_state_check("classifier").await;
}

#[resilient(retries = 3, idempotent, base_ms = 1, deadline_ms = 5000)]
async fn catches_inner_panic(dep: &Dep) -> Result<u32, E> {
    match AssertUnwindSafe(deadline_body(dep)).catch_unwind().await {
        Ok(r) => r,
        Err(_) => {
            // What the body sees after its nested call panicked.
            if resilient::remaining() > Some(Duration::from_millis(100)) {
                Err(E::Down)
            } else {
                Err(E::Permanent)
            }
        }
    }
}

/// A body catching its nested call's panic goes on in its own context and
/// is retried as its error says.
#[tokio::test(start_paused = true)]
async fn a_body_that_catches_a_nested_panic_is_retried() {
    let _g = serial();
    let dep = Dep::new(Mode::Panic);
    let (res, report) = resilient::observe(catches_inner_panic(&dep)).await;
    assert!(matches!(res, Err(E::Down)), "{res:?} {report:?}");
    assert_eq!(dep.runs(), 4, "{report:?}");
    assert_eq!(in_flight(), 0);
    fresh_state_check("after the body caught").await;
}

// ================================================================= bulkhead waits

#[resilient(bulkhead = "s-bhw", deadline_ms = 300)]
async fn s_wait_deadline(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

#[resilient(deadline_ms = 300)]
async fn outer_300(dep: &Dep) -> Result<u32, E> {
    s_wait(dep).await
}

/// A wait for a slot never outlasts the call's own or inherited deadline.
#[tokio::test(start_paused = true)]
async fn a_wait_for_a_slot_ends_at_the_deadline() {
    let _g = serial();
    let r = scoped();
    let holder = Dep::new(Mode::Sleep(3000));
    r.scope(async {
        let h = holder.clone();
        let first = tokio::spawn(Registry::current().scope(async move { s_wait(&h).await }));
        tokio::task::yield_now().await;
        for (what, inherited) in [("own", false), ("inherited", true)] {
            let waiter = Dep::new(Mode::Ok);
            let start = Instant::now();
            let res = if inherited {
                outer_300(&waiter).await
            } else {
                s_wait_deadline(&waiter).await
            };
            assert_eq!(
                start.elapsed(),
                Duration::from_millis(300),
                "{what}: {res:?}"
            );
            assert_eq!(waiter.runs(), 0, "{what}");
        }
        first.abort();
    })
    .await;
    tokio::task::yield_now().await;
    assert_eq!(bulkhead_in_flight(&r, "s-bhw"), 0);
    assert_eq!(in_flight(), 0);
}

/// The holder of the only slot panics: a waiter gets the slot then.
#[tokio::test(start_paused = true)]
async fn a_waiter_gets_the_slot_when_its_holder_panics() {
    let _g = serial();
    let r = scoped();
    let holder = Dep::new(Mode::SleepPanic(100));
    let waiter = Dep::new(Mode::Ok);
    r.scope(async {
        let h = holder.clone();
        let first = tokio::spawn(Registry::current().scope(async move { s_wait(&h).await }));
        tokio::task::yield_now().await;
        let start = Instant::now();
        let res = s_wait(&waiter).await;
        assert!(res.is_ok(), "{res:?}");
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert!(first.await.unwrap_err().is_panic());
    })
    .await;
    assert_eq!(bulkhead_in_flight(&r, "s-bhw"), 0);
    assert_eq!(in_flight(), 0);
}

// ================================================================= Retry-After holds at any uptime

#[resilient(retries = 2, idempotent, breaker = "ra", base_ms = 1)]
async fn ra_call(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

/// A breaker that opens on a Retry-After: the retry that slept exactly the
/// Retry-After is admitted, at day 0 and after long uptimes.
#[tokio::test(start_paused = true)]
async fn retry_after_hold_is_exact_at_any_uptime() {
    let _g = serial();
    let long_lived = Registry::builder()
        .breaker("ra", BreakerConfig::default().open_on_retry_after(true))
        .build()
        .unwrap();
    let mut previous = 0;
    for days in [0u64, 25, 49, 50, 400] {
        let target = Duration::from_secs(days * 86_400);
        if days == 49 {
            tokio::time::advance(
                Duration::from_millis(1 << 32)
                    - Duration::from_secs(previous * 86_400)
                    - Duration::from_millis(500),
            )
            .await;
        } else {
            tokio::time::advance(target.saturating_sub(Duration::from_secs(previous * 86_400)))
                .await;
        }
        previous = days;
        for r in [
            &long_lived,
            &Registry::builder()
                .breaker("ra", BreakerConfig::default().open_on_retry_after(true))
                .build()
                .unwrap(),
        ] {
            r.breaker("ra").unwrap().reset();
            let dep = Dep::new(Mode::Throttle(1000));
            let start = Instant::now();
            let res = r.scope(ra_call(&dep)).await;
            assert_eq!(dep.runs(), 3, "day {days}: {res:?}");
            assert_eq!(
                start.elapsed(),
                Duration::from_millis(2000),
                "day {days}: {res:?}"
            );
            // The breaker is held open for exactly 1 s after the last reply.
            let b = r.breaker("ra").unwrap();
            assert_eq!(b.state(), State::Open, "day {days}");
            tokio::time::advance(Duration::from_millis(999)).await;
            assert!(b.try_acquire().is_err(), "day {days}");
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(b.try_acquire().is_ok(), "day {days}");
            tokio::time::advance(Duration::from_secs(600)).await;
        }
    }
    assert_eq!(in_flight(), 0);
}

// ================================================================= a Display that panics, under a subscriber

#[derive(Debug)]
enum Loud {
    Down,
    Refused(resilient::Error),
}
impl From<resilient::Error> for Loud {
    fn from(e: resilient::Error) -> Self {
        Loud::Refused(e)
    }
}
impl Classify for Loud {
    fn classify(&self) -> Classification {
        match self {
            Loud::Down => Classification::Transient,
            Loud::Refused(e) => e.classify(),
        }
    }
}
impl std::fmt::Display for Loud {
    fn fmt(&self, _f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        panic!("Display panics")
    }
}
impl std::error::Error for Loud {}

#[resilient(
    retries = 2,
    idempotent,
    base_ms = 1,
    breaker = "s-br",
    bulkhead = "s-bh"
)]
async fn loud(dep: &Dep) -> Result<u32, Loud> {
    dep.call().await.map_err(|_| Loud::Down)
}

/// An error whose `Display` panics while the library logs it: nothing held.
#[tokio::test(start_paused = true)]
async fn an_error_display_that_panics_while_logged_leaves_nothing_held() {
    let _g = serial();
    let _sub = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_test_writer()
            .finish(),
    );
    let r = scoped();
    let b = r.breaker("s-br").unwrap();
    b.transition_to(State::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    let dep = Dep::new(Mode::Fail);
    let caught = AssertUnwindSafe(r.scope(loud(&dep))).catch_unwind().await;
    let what = format!(
        "{:?} runs {}",
        caught.as_ref().map(|r| r.as_ref().map_err(|_| ())),
        dep.runs()
    );
    assert_eq!(bulkhead_in_flight(&r, "s-bh"), 0, "{what}");
    assert_eq!(in_flight(), 0, "{what}");
    drop(_sub);
    // The probe outcome was recorded or given back: the breaker is not stuck.
    let state = b.state();
    if state == State::HalfOpen {
        dep.set(Mode::Ok);
        let ok = r.scope(s_body(&dep)).await;
        assert!(ok.is_ok(), "{what}: stuck half-open: {ok:?}");
    }
    fresh_state_check(&what).await;
}

// ================================================================= a body that blocks its thread

#[resilient(breaker = "blk")]
async fn blocks(ms: u64) -> Result<u32, E> {
    std::thread::sleep(Duration::from_millis(ms));
    Ok(1)
}

fn blocking_registry() -> Registry {
    Registry::builder()
        .breaker(
            "blk",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 10 })
                .minimum_number_of_calls(10)
                .slow_call_duration_threshold(Duration::from_millis(500)),
        )
        .build()
        .unwrap()
}

/// The same blocking bodies get the same verdict at day 0 and later.
#[tokio::test(start_paused = true)]
async fn a_blocking_body_is_timed_the_same_at_any_uptime() {
    let _g = serial();
    let mut verdicts = Vec::new();
    for offset in [0u64, 25 * 86_400, 400 * 86_400] {
        tokio::time::advance(Duration::from_secs(offset)).await;
        let r = blocking_registry();
        let _ = r.scope(blocks(10)).await;
        let fast = r.breaker("blk").unwrap().snapshot().slow_calls;
        let _ = r.scope(blocks(650)).await;
        let slow = r.breaker("blk").unwrap().snapshot().slow_calls;
        verdicts.push((fast, slow));
    }
    eprintln!("{verdicts:?}");
    assert!(verdicts.iter().all(|v| *v == verdicts[0]), "{verdicts:?}");
    assert_eq!(verdicts[0].0, 0);
}

// ================================================================= a hostile Retry-After at long uptime

#[resilient(
    retries = 2,
    idempotent,
    breaker = "ra",
    base_ms = 1,
    deadline_ms = 5000
)]
async fn ra_deadline(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

/// A Retry-After of ~584 million years: no retry, no panic, the breaker
/// held for `max_retry_after_hold` exactly, at day 0 and day 400.
#[tokio::test(start_paused = true)]
async fn a_huge_retry_after_is_bounded_at_any_uptime() {
    let _g = serial();
    for offset in [0u64, 400 * 86_400] {
        tokio::time::advance(Duration::from_secs(offset)).await;
        for with_deadline in [false, true] {
            let r = Registry::builder()
                .breaker(
                    "ra",
                    BreakerConfig::default()
                        .open_on_retry_after(true)
                        .max_retry_after_hold(Duration::from_secs(300)),
                )
                .build()
                .unwrap();
            let dep = Dep::new(Mode::Throttle(u64::MAX));
            let start = Instant::now();
            let res = if with_deadline {
                r.scope(ra_deadline(&dep)).await
            } else {
                r.scope(ra_call(&dep)).await
            };
            let what = format!("day {} deadline {with_deadline}: {res:?}", offset / 86_400);
            assert_eq!(dep.runs(), 1, "{what}");
            assert_eq!(start.elapsed(), Duration::ZERO, "{what}");
            let b = r.breaker("ra").unwrap();
            assert_eq!(b.state(), State::Open, "{what}");
            tokio::time::advance(Duration::from_secs(300) - Duration::from_nanos(1)).await;
            assert!(b.try_acquire().is_err(), "{what}");
            tokio::time::advance(Duration::from_nanos(1)).await;
            assert!(b.try_acquire().is_ok(), "{what}");
        }
    }
    assert_eq!(in_flight(), 0);
}
