//! A bad subscriber must not break the call or the breaker (issue 7, item 6),
//! and transitions say why (issue 9).
//!
//! The guarantee tested here: subscribers never run on a caller's thread.
//! A call that causes an event (a transition, a refusal) returns what it
//! would have returned with no subscriber at all, whether the subscriber
//! panics, blocks or is slow; events reach subscribers in order, at most
//! once, and are dropped (and counted) only when the bounded queue is full,
//! rejections before transitions.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use resilient::{
    Breaker, BreakerConfig, BreakerEvent, Classification, Classify, ErrorKind, EventHub, Registry,
    SlidingWindow, State, TransitionReason, resilient,
};
use tokio::time::advance;

mod support;
use support::PanicsOn;

#[path = "support/interest.rs"]
mod interest;

const FLUSH: Duration = Duration::from_secs(10);
const FAILURE: Option<Classification> = Some(Classification::Transient);
const SUCCESS: Option<Classification> = None;

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

/// A dependency that fails while `down` is set.
#[derive(Default)]
struct Dep {
    down: std::sync::atomic::AtomicBool,
    calls: AtomicUsize,
}

impl Dep {
    async fn call(&self) -> Result<u32, E> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        if self.down.load(Ordering::SeqCst) {
            Err(E::Down)
        } else {
            Ok(7)
        }
    }
}

#[resilient(breaker = "payments")]
async fn pay(dep: &Dep) -> Result<u32, E> {
    dep.call().await
}

fn window_of_four() -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size: 4 })
        .minimum_number_of_calls(4)
        .wait_duration_in_open_state(Duration::from_secs(10))
        .permitted_number_of_calls_in_half_open_state(1)
}

fn registry() -> Registry {
    Registry::builder()
        .breaker("payments", window_of_four())
        .build()
        .unwrap()
}

fn refusal(result: Result<u32, E>) -> Option<ErrorKind> {
    match result {
        Err(E::Resilience(e)) => Some(e.kind()),
        _ => None,
    }
}

/// Opens, refuses, half-opens and closes the registry's breaker through the
/// attribute, asserting every call's result on the way.
async fn outage_and_recovery(reg: &Registry, dep: &Dep) {
    dep.down.store(true, Ordering::SeqCst);
    for _ in 0..4 {
        assert!(
            matches!(pay(dep).await, Err(E::Down)),
            "the body's own error"
        );
    }
    assert_eq!(reg.breaker("payments").unwrap().state(), State::Open);
    assert_eq!(
        refusal(pay(dep).await),
        Some(ErrorKind::BreakerOpen),
        "a refusal, not a panic"
    );
    dep.down.store(false, Ordering::SeqCst);
    advance(Duration::from_secs(10)).await;
    assert_eq!(
        pay(dep).await.unwrap(),
        7,
        "the probe ran and its result came back"
    );
    assert_eq!(
        reg.breaker("payments").unwrap().state(),
        State::Closed,
        "the probe closed it"
    );
    assert_eq!(pay(dep).await.unwrap(), 7);
    assert_eq!(dep.calls.load(Ordering::SeqCst), 6);
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_panicking_on_every_event_changes_no_calls_result() {
    let reg = registry();
    let panics = Arc::new(AtomicUsize::new(0));
    let count = panics.clone();
    let subscription = reg.subscribe(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
        panic!("subscriber bug");
    });
    let dep = Dep::default();
    reg.scope(outage_and_recovery(&reg, &dep)).await;
    assert!(subscription.flush(FLUSH));
    assert!(
        panics.load(Ordering::SeqCst) >= 4,
        "it kept its subscription and kept being called"
    );
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_panicking_on_open_to_half_open_does_not_lose_the_probe() {
    let reg = registry();
    let subscription = reg.subscribe(|e| {
        if let BreakerEvent::StateTransition {
            to: State::HalfOpen,
            ..
        } = e
        {
            panic!("subscriber bug on half-open");
        }
    });
    let dep = Dep::default();
    reg.scope(outage_and_recovery(&reg, &dep)).await;
    assert!(subscription.flush(FLUSH));
    // And again: the breaker is fully working after the panic.
    reg.scope(async {
        dep.down.store(true, Ordering::SeqCst);
        for _ in 0..4 {
            let _ = pay(&dep).await;
        }
        advance(Duration::from_secs(10)).await;
        dep.down.store(false, Ordering::SeqCst);
        assert_eq!(pay(&dep).await.unwrap(), 7);
    })
    .await;
    assert_eq!(reg.breaker("payments").unwrap().state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_subscriber_does_not_stop_the_others() {
    let b = Breaker::new("dep", window_of_four()).unwrap();
    let _bad = b.subscribe(|_| panic!("subscriber bug"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let good = b.subscribe(move |e| sink.lock().unwrap().push(e.clone()));
    b.transition_to(State::ForcedOpen);
    b.reset();
    assert!(good.flush(FLUSH));
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// Calls `f` on another thread and waits `limit` of real time for it.
fn finishes_within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    result
        .recv_timeout(limit)
        .expect("the calls waited for a blocked subscriber")
}

/// A blocked subscriber, then a flood of rejections: the rejections that do
/// not fit are dropped, but the transitions that end the outage are not (a
/// subscriber keeping the state, such as the metrics publisher's gauge,
/// showed `open` for good after the breaker closed: review 23).
#[test]
fn a_blocked_subscriber_delays_no_call_and_gets_a_prefix_of_the_events_in_order() {
    let _one_at_a_time = DROP_WARNING.lock().unwrap_or_else(|e| e.into_inner());
    let b = Arc::new(Breaker::new("dep", window_of_four()).unwrap());
    let (release, blocked) = mpsc::channel::<()>();
    let blocked = Mutex::new(blocked);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let subscription = b.subscribe(move |e| {
        // Blocks on the first event until the test releases it.
        let _ = blocked.lock().unwrap().recv();
        sink.lock().unwrap().push(e.clone());
    });
    const REFUSED: usize = 3 * EventHub::QUEUE_CAPACITY;
    let caller = b.clone();
    let emitted = finishes_within(Duration::from_secs(30), move || {
        for _ in 0..4 {
            caller.try_acquire().unwrap().record(FAILURE);
        }
        for _ in 0..REFUSED {
            assert!(caller.try_acquire().is_err());
        }
        // A probe that fails opens it again (its rate exceeded, then the
        // transition: both in the reserved places), then one that
        // succeeds ends the outage.
        caller.transition_to(State::HalfOpen);
        caller.try_acquire().unwrap().record(FAILURE);
        assert_eq!(caller.state(), State::Open);
        caller.transition_to(State::HalfOpen);
        caller.try_acquire().unwrap().record(SUCCESS);
        assert_eq!(caller.state(), State::Closed);
        // rate exceeded, closed → open, the refusals, open → half-open,
        // rate exceeded, half-open → open, open → half-open, → closed
        2 + REFUSED + 5
    });
    drop(release); // every later recv returns at once
    assert!(subscription.flush(FLUSH));
    let seen = seen.lock().unwrap();
    let dropped = subscription.dropped_events() as usize;
    assert_eq!(
        seen.len() + dropped,
        emitted,
        "each event delivered or dropped"
    );
    assert!(
        seen.len() >= EventHub::QUEUE_CAPACITY - EventHub::RESERVED_FOR_TRANSITIONS,
        "the queue held its capacity"
    );
    let transitions: Vec<(State, State)> = seen
        .iter()
        .filter_map(|e| match e {
            BreakerEvent::StateTransition { from, to, .. } => Some((*from, *to)),
            _ => None,
        })
        .collect();
    assert_eq!(
        transitions,
        [
            (State::Closed, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Open),
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Closed)
        ],
        "no transition dropped, in order"
    );
    // The rate a transition reports arrives with it (it was dropped with
    // the rejections, before the reserved places took it).
    let reopened = seen
        .iter()
        .position(|e| {
            matches!(
                e,
                BreakerEvent::StateTransition {
                    from: State::HalfOpen,
                    to: State::Open,
                    ..
                }
            )
        })
        .expect("half-open -> open delivered");
    assert!(
        matches!(seen[reopened - 1], BreakerEvent::FailureRateExceeded { .. }),
        "the rate exceeded is delivered just before its transition: {:?}",
        seen[reopened - 1]
    );
    assert!(matches!(seen[0], BreakerEvent::FailureRateExceeded { .. }));
    assert!(matches!(
        seen[1],
        BreakerEvent::StateTransition {
            from: State::Closed,
            to: State::Open,
            ..
        }
    ));
    assert!(
        seen[2..seen.len() - 5]
            .iter()
            .all(|e| matches!(e, BreakerEvent::CallNotPermitted { .. })),
        "in order, the newest dropped"
    );
}

/// A rate a transition reports comes just before it, and may use the
/// places reserved for transitions only while its transition fits too:
/// with one place left, the rate that once took it left the transition
/// out, and a subscriber keeping the state never learned the breaker had
/// opened (review 34). A flush that timed out took it too (review 35).
#[test]
fn a_rate_never_takes_the_last_place_from_its_transition() {
    let _one_at_a_time = DROP_WARNING.lock().unwrap_or_else(|e| e.into_inner());
    let b = Breaker::new("dep", window_of_four()).unwrap();
    let (entered, first_taken) = mpsc::channel::<()>();
    let (release, blocked) = mpsc::channel::<()>();
    let (entered, blocked) = (Mutex::new(entered), Mutex::new(blocked));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let subscription = b.subscribe(move |e| {
        let _ = entered.lock().unwrap().send(());
        let _ = blocked.lock().unwrap().recv();
        sink.lock().unwrap().push(e.clone());
    });
    b.transition_to(State::Open);
    // The delivery thread holds the first event (out of the queue) before
    // the queue is filled: the count below is then exact.
    first_taken
        .recv_timeout(FLUSH)
        .expect("the first event delivered");
    // 768 rejections fill the places open to them.
    for _ in 0..2 * EventHub::QUEUE_CAPACITY {
        assert!(b.try_acquire().is_err());
    }
    // Transitions take the reserved places but one.
    for _ in 0..EventHub::RESERVED_FOR_TRANSITIONS - 2 {
        b.transition_to(State::Open);
    }
    b.transition_to(State::Closed);
    // A flush the blocked subscriber makes time out takes no place kept
    // for transitions (review 35: its message took the last one).
    assert!(!subscription.flush(Duration::from_millis(5)));
    for _ in 0..4 {
        b.try_acquire().unwrap().record(FAILURE);
    }
    assert_eq!(b.state(), State::Open, "four failures opened it");
    drop(release);
    assert!(subscription.flush(FLUSH));
    let seen = seen.lock().unwrap();
    let last = seen.last().expect("events delivered");
    assert!(
        matches!(
            last,
            BreakerEvent::StateTransition {
                from: State::Closed,
                to: State::Open,
                reason: TransitionReason::FailureRate { .. },
                ..
            }
        ),
        "the last transition arrives (not only its rate, nor a transition before it): {last:?}"
    );
    for (i, e) in seen.iter().enumerate() {
        if matches!(e, BreakerEvent::FailureRateExceeded { .. }) {
            assert!(
                matches!(seen.get(i + 1), Some(BreakerEvent::StateTransition { .. })),
                "a rate without its transition at {i}"
            );
        }
    }
}

/// A rate and its transition arrive together, nothing between them, while
/// another thread's rejections pour in (review 36: a rejection landed
/// between them, and on a registry's shared hub another breaker's
/// transition could take the place the rate had left its transition).
#[test]
fn a_rate_and_its_transition_arrive_with_nothing_between_them() {
    let tripping = BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size: 1 })
        .minimum_number_of_calls(1)
        .wait_duration_in_open_state(Duration::from_secs(3600));
    let b = Arc::new(Breaker::new("dep", tripping).unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let subscription = b.subscribe(move |e| sink.lock().unwrap().push(e.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = b.try_acquire();
            }
        })
    };
    finishes_within(Duration::from_secs(60), {
        let b = b.clone();
        move || {
            for _ in 0..2000 {
                b.transition_to(State::Closed);
                // The flooding thread may take the permit in between.
                if let Ok(permit) = b.try_acquire() {
                    permit.record(FAILURE);
                }
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    assert!(subscription.flush(FLUSH));
    let seen = seen.lock().unwrap();
    let rates = seen
        .iter()
        .filter(|e| matches!(e, BreakerEvent::FailureRateExceeded { .. }))
        .count();
    assert!(rates > 0, "the breaker opened on a failure");
    let apart: Vec<usize> = (0..seen.len())
        .filter(|&i| {
            matches!(seen[i], BreakerEvent::FailureRateExceeded { .. })
                && !matches!(
                    seen.get(i + 1),
                    Some(BreakerEvent::StateTransition {
                        to: State::Open,
                        ..
                    })
                )
        })
        .collect();
    assert!(
        apart.is_empty(),
        "{} of {rates} rates not followed at once by their transition (first at {:?})",
        apart.len(),
        apart.first()
    );
}

/// A panic payload whose own drop panics (`resume_unwind` of a value
/// with a panicking `Drop`) is contained as the panic was: it ended the
/// delivery thread, and every later event was lost (review 37).
#[test]
fn a_panic_payload_that_panics_on_drop_does_not_stop_delivery() {
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("the payload's drop panics too");
            }
        }
    }
    let b = Breaker::new("dep", window_of_four()).unwrap();
    let armed = Arc::new(AtomicBool::new(true));
    let _bad = b.subscribe(move |e| {
        if matches!(e, BreakerEvent::FailureRateExceeded { .. })
            && armed.swap(false, Ordering::SeqCst)
        {
            std::panic::resume_unwind(Box::new(Bomb));
        }
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let good = b.subscribe(move |e| sink.lock().unwrap().push(e.clone()));
    for _ in 0..4 {
        b.try_acquire().unwrap().record(FAILURE);
    }
    b.transition_to(State::Closed);
    b.transition_to(State::Open);
    assert!(good.flush(FLUSH), "the delivery thread is still there");
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.len(),
        4,
        "rate, closed -> open, and two more: {seen:?}"
    );
    assert_eq!(good.dropped_events(), 0);
}

/// `flush(Duration::MAX)` waits for as long as delivery takes (review 36:
/// it panicked, adding the timeout to the clock).
#[test]
fn a_flush_without_a_bound_waits_for_delivery() {
    let b = Breaker::new("dep", window_of_four()).unwrap();
    let delivered = Arc::new(AtomicUsize::new(0));
    let count = delivered.clone();
    let subscription = b.subscribe(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    });
    b.transition_to(State::Open);
    let flushed = finishes_within(Duration::from_secs(30), move || {
        let done = subscription.flush(Duration::MAX);
        (done, subscription)
    });
    assert!(flushed.0);
    assert_eq!(delivered.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn transitions_carry_their_reasons() {
    let b = Breaker::new(
        "dep",
        window_of_four().permitted_number_of_calls_in_half_open_state(2),
    )
    .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let subscription = b.subscribe(move |e| {
        if let BreakerEvent::StateTransition {
            from, to, reason, ..
        } = e
        {
            sink.lock().unwrap().push((*from, *to, *reason));
        }
    });
    let call = |outcome| b.try_acquire().unwrap().record(outcome);
    for outcome in [SUCCESS, FAILURE, FAILURE, FAILURE] {
        call(outcome);
    }
    advance(Duration::from_secs(10)).await;
    call(FAILURE); // probe 1 of 2 (opens half-open)
    call(SUCCESS); // probe 2: 50 % failed
    advance(Duration::from_secs(10)).await;
    call(SUCCESS);
    call(SUCCESS);
    b.transition_to(State::ForcedOpen);
    b.reset();
    assert!(subscription.flush(FLUSH));
    use State::*;
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (
                Closed,
                Open,
                TransitionReason::FailureRate {
                    rate: 75.0,
                    threshold: 50.0,
                    calls: 4
                }
            ),
            (Open, HalfOpen, TransitionReason::WaitElapsed),
            (
                HalfOpen,
                Open,
                TransitionReason::ProbesFailed {
                    failure_rate: 50.0,
                    failure_rate_threshold: 50.0,
                    slow_call_rate: 0.0,
                    slow_call_rate_threshold: 100.0,
                    calls: 2
                }
            ),
            (Open, HalfOpen, TransitionReason::WaitElapsed),
            (
                HalfOpen,
                Closed,
                TransitionReason::ProbesSucceeded { calls: 2 }
            ),
            (Closed, ForcedOpen, TransitionReason::Manual),
            (ForcedOpen, Closed, TransitionReason::Reset),
        ]
    );
}

#[test]
fn reasons_display_as_one_log_line() {
    assert_eq!(
        TransitionReason::FailureRate {
            rate: 62.5,
            threshold: 50.0,
            calls: 8
        }
        .to_string(),
        "failure rate 62.5 % over 8 calls >= threshold 50 %"
    );
    assert_eq!(
        TransitionReason::SlowCallRate {
            rate: 100.0,
            threshold: 80.0,
            calls: 1
        }
        .to_string(),
        "slow-call rate 100.0 % over 1 call >= threshold 80 %"
    );
    assert_eq!(
        TransitionReason::RetryAfter {
            hold: Duration::from_secs(2)
        }
        .to_string(),
        "held open by a Retry-After of 2s"
    );
    assert_eq!(
        TransitionReason::ProbesSucceeded { calls: 3 }.to_string(),
        "half-open probes succeeded: 3 probes below both thresholds"
    );
    assert_eq!(TransitionReason::Reset.to_string(), "reset by hand");
}

/// A small xorshift generator, seeded per thread and round.
fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Runs `work(breaker, thread's rng)` on `threads` threads at once, then
/// asserts that the transitions a subscriber got form one chain from the
/// breaker's initial state to its state now, none lost (`expected`, when
/// known) and none dropped. Returns how many there were.
fn transitions_chain(
    breaker: Breaker,
    threads: u64,
    seed: u64,
    expected: Option<usize>,
    work: impl Fn(&Breaker, &mut dyn FnMut() -> u64) + Send + Sync + 'static,
) -> usize {
    let b = Arc::new(breaker);
    let initial = b.state();
    let seen: Arc<Mutex<Vec<(State, State)>>> = Arc::default();
    let sub = {
        let seen = seen.clone();
        b.subscribe(move |e| {
            if let BreakerEvent::StateTransition { from, to, .. } = e {
                seen.lock().unwrap().push((*from, *to));
            }
        })
    };
    let work = Arc::new(work);
    let barrier = Arc::new(std::sync::Barrier::new(threads as usize));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (b, barrier, work) = (b.clone(), barrier.clone(), work.clone());
            std::thread::spawn(move || {
                let mut r = rng(seed * 31 + t + 1);
                barrier.wait();
                work(&b, &mut r);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(sub.flush(FLUSH));
    assert_eq!(sub.dropped_events(), 0, "round {seed}: none dropped");
    let seen = seen.lock().unwrap();
    if let Some(n) = expected {
        assert_eq!(seen.len(), n, "round {seed}: every transition delivered");
    }
    let mut at = initial;
    for (i, &(from, to)) in seen.iter().enumerate() {
        let around = &seen[i.saturating_sub(3)..(i + 3).min(seen.len())];
        assert_eq!(
            from, at,
            "round {seed}: transition {i}, around it {around:?}"
        );
        at = to;
    }
    assert_eq!(at, b.state(), "round {seed}: the chain ends in the state");
    seen.len()
}

/// Transitions by hand from six threads: each one delivered, in the order
/// made (review 26: up to all rounds lost some with none counted dropped,
/// or broke the chain, when one thread's announcement lagged behind
/// others').
#[test]
fn transitions_by_hand_from_many_threads_form_one_chain() {
    const STATES: [State; 6] = [
        State::Closed,
        State::Open,
        State::HalfOpen,
        State::Disabled,
        State::ForcedOpen,
        State::MetricsOnly,
    ];
    for round in 0..30 {
        let b = Breaker::new("by-hand", window_of_four()).unwrap();
        // 900 transitions: fewer than the event queue holds.
        transitions_chain(b, 6, round, Some(900), |b, r| {
            for _ in 0..150 {
                if r() % 5 == 0 {
                    b.reset();
                } else {
                    b.transition_to(STATES[(r() % 6) as usize]);
                }
                if r() % 3 == 0 {
                    std::thread::yield_now();
                }
            }
        });
    }
}

/// Transitions the calls make (open, half-open after a wait of 1 ns,
/// closed or open again), from four threads: one chain from `closed`
/// (review 26: the first transition, announced after the second, was
/// never delivered in a few rounds in a hundred).
#[test]
fn transitions_of_concurrent_calls_form_one_chain_from_the_start() {
    let mut total = 0;
    for round in 0..150 {
        let b = Breaker::new(
            "calls",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 2 })
                .minimum_number_of_calls(2)
                .permitted_number_of_calls_in_half_open_state(1)
                .wait_duration_in_open_state(Duration::from_nanos(1)),
        )
        .unwrap();
        total += transitions_chain(b, 4, round, None, |b, r| {
            for _ in 0..40 {
                if let Ok(permit) = b.try_acquire() {
                    if r() % 2 == 0 {
                        std::thread::yield_now();
                    }
                    permit.record(if r() % 3 == 0 { SUCCESS } else { FAILURE });
                }
            }
        });
    }
    assert!(total > 1000, "the calls made transitions: {total}");
}

/// The tests that make a breaker drop events run one at a time: the drop
/// warning's callsite is shared, and one test's thread (with no
/// subscriber) and another's (with a scoped one) interfere in how tracing
/// caches whether it is wanted.
static DROP_WARNING: Mutex<()> = Mutex::new(());

/// The queue's first drop is logged on the caller's thread while the
/// breaker's transitions are put in order: a tracing layer that panics
/// there held back every later transition of the breaker (review 29).
#[test]
fn a_panic_in_the_drop_warning_holds_back_no_later_transition() {
    use tracing_subscriber::layer::SubscriberExt;
    let _one_at_a_time = DROP_WARNING.lock().unwrap_or_else(|e| e.into_inner());
    // The rejections `a_rate_and_its_transition_arrive_with_nothing_between_them`
    // floods on a thread with no subscriber can fill its own breaker's queue
    // and log the first drop there: without a second dispatcher, that
    // registers the warning's callsite as never wanted while this test's
    // subscriber is the only one (about one run in seven at 8 test threads).
    interest::keep();
    let breaker = Breaker::new("drop-warning", window_of_four()).unwrap();
    let (release, blocked) = mpsc::channel::<()>();
    let blocked = Mutex::new(blocked);
    let seen = Arc::new(Mutex::new(0usize));
    let subscription = {
        let seen = seen.clone();
        breaker.subscribe(move |e| {
            if let BreakerEvent::StateTransition { .. } = e {
                let _ = blocked.lock().unwrap().recv();
                *seen.lock().unwrap() += 1;
            }
        })
    };
    let flip = |i: usize| {
        if i & 1 == 0 {
            State::ForcedOpen
        } else {
            State::Closed
        }
    };
    let layer = tracing_subscriber::registry().with(PanicsOn("events dropped"));
    let panicked = tracing::subscriber::with_default(layer, || {
        (0..2 * EventHub::QUEUE_CAPACITY).find(|&i| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                breaker.transition_to(flip(i))
            }))
            .is_err()
        })
    });
    assert!(panicked.is_some(), "the drop warning was logged");
    drop(release);
    assert!(subscription.flush(FLUSH));
    let before = *seen.lock().unwrap();
    for i in 0..10 {
        breaker.transition_to(flip(i));
    }
    assert!(subscription.flush(FLUSH));
    assert_eq!(*seen.lock().unwrap() - before, 10, "each one delivered");
}
