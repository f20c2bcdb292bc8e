//! `resilient` next to its peers, in one run, on the same operation.
//!
//! Every case wraps the same `async fn` that returns `Ok` on its first poll,
//! polled by hand with a no-op waker inside a current-thread tokio runtime's
//! context: what is measured is the wrapper, not a scheduler. Each case is
//! measured as the median, over many samples, of the calling thread's CPU
//! time per call (`CLOCK_THREAD_CPUTIME_ID`, so time the thread spends
//! descheduled does not count), with allocations per call from a counting
//! global allocator. The cases that share state between threads (a breaker,
//! an atomic) are measured again on two threads at once.
//!
//! Each figure is the median over several processes (two per CPU;
//! `PEERS_PROCS`), each pinned to one CPU, the CPUs in turn (`pinning`;
//! `PEERS_PIN=0` leaves them free). Within a process the one-thread cases
//! take turns sample by sample (`all_cases`): on the README's machine the
//! same code ran at one of two speeds, for tens of milliseconds to minutes
//! at a time, on one CPU or on both, as the host's other work came and
//! went, so that cases measured one after the other met different states
//! and their ratios were not of like with like. For the same reason a
//! two-thread process takes turns too (`two_run`): each thread alone, then
//! both at once, round after round, and a thread's two-thread figure is
//! set against its own figure alone.
//!
//! ```text
//! cargo bench -p resilient-benches --bench peers            # full run, about 2.5 min
//! PEERS_PROCS=1 cargo bench -p resilient-benches --bench peers   # one process
//! PEERS_QUICK=1 cargo bench -p resilient-benches --bench peers   # smoke run
//! PEERS_MD=target/peers.md cargo bench ...                   # Markdown copy
//! PEERS_LIST=1 <bench binary>                                # case ids
//! PEERS_CASE=<id> PEERS_ITERS=<n> <bench binary>             # one case n times
//! PEERS_PAD=<k> PEERS_CASE=<id> PEERS_ITERS=<n> <bench binary> # k frames deeper
//! PEERS_TWO=<id> <bench binary>                               # one case, 1 and 2 threads
//! PEERS_CHILD=one <bench binary>                              # one process of the run
//! PEERS_CHILD=one@1 <bench binary>                            # the same, pinned to CPU 1
//! PEERS_INSTRUCTIONS=<file> <bench binary>                   # render counts
//! ```
//!
//! The last three are for `benches/callgrind.sh`, which counts instructions
//! per call under valgrind: deterministic, where CPU time on a shared
//! machine is not.
//!
//! A relative `PEERS_MD` (or a path given as the first argument that is not
//! a flag) is taken from the workspace root, since cargo runs benches from
//! the package's directory.
//!
//! # Floor sketches
//!
//! The performance issue sets targets as ratios to peers, and asks that a
//! target shown to be below what the semantics allow be shown so: "a
//! minimal hand-written version measured in the same run, and what stands
//! between." The `floor_*` cases are those versions (`floor/mod.rs`): for
//! each `resilient_*` case, hand-written futures with the same semantics on
//! the success path and the plain failure path, as a competent engineer
//! would write them for speed, with no telemetry. Each runs its body in an
//! attempt frame (a thread-local `Copy` value swapped in for each poll:
//! the inherited deadline, the path's attempt cap and position, a nested
//! give-up), checks a graceful shutdown (one relaxed load), and then:
//!
//! * `floor_deadline`: one clock read; the deadline is the earlier of the
//!   inherited one and a second from now; a timer only if the body waits.
//! * `floor_retries`: no clock read; on a transient error, another attempt
//!   (a fresh future) after a full-jitter backoff, while the layer's
//!   retries and the path's cap allow.
//! * `floor_breaker`: a static breaker with a count window of 100 outcomes;
//!   admission is one load of the state word; the call timed as the library
//!   times it (a call over 60 s is slow): it starts on tokio's clock (and
//!   the coarse one), and ends on the coarse clock if the body never waited,
//!   else on tokio's; recording is a `fetch_add` on the slot counter and a
//!   load of the slot, written only if the outcome changed, with the totals
//!   and the trip check then.
//! * `floor_full`: retries, deadline, a per-attempt timeout, the breaker, a
//!   bulkhead slot (compare-and-swap, given back on drop) and the retry
//!   budget's request count (per-second buckets tagged with their second);
//!   one read of tokio's clock at the start of each attempt, and the
//!   breaker's coarse reads.
//!
//! Variants: `floor_retries_traced`, `floor_deadline_traced`,
//! `floor_breaker_traced` and `floor_full_traced` run the sketch inside
//! the `tracing` span the library opens per call with its default
//! features (disabled, as no subscriber is installed), kept in the
//! sketch's state and entered while the body is polled, as the library
//! keeps its own: the cost of that telemetry at the least.
//! `floor_breaker_unclocked` and `floor_full_unclocked` are lower bounds,
//! not sketches: the same code without timing calls at all, which any
//! design of the slow-call check can only add to.
//!
//! The ratio tables give each sketch's ratio to the same peer next to the
//! library's. What stands between a sketch and the library, on the success
//! path, is what the library does there beyond the semantics above:
//!
//! * one engine for every combination of attributes: its futures (the
//!   call, its attempts, the bounded body) are general `async` state
//!   machines, and a call without a breaker, budget or bulkhead still asks
//!   its (absent) parts to admit and record each attempt, where each sketch
//!   is written for its one case;
//! * telemetry: a `tracing` span per call, entered for each poll of an
//!   attempt (the README has its own cost table);
//! * the `async fn` the attribute keeps around the engine's future: the
//!   `retries` sketch, called from an `async fn` of its own, measured 173
//!   instructions per call against 154 called directly (callgrind, one
//!   run), about 20 of the 160 between the library and the sketch in its
//!   span;
//! * finding its parts: a look for a registry scoped around the task (a
//!   task-local), then the call site's `OnceLock` and the parts' `Arc`s,
//!   where a sketch names statics;
//! * a larger frame (whether the call is observed or admitted, a
//!   transparent frame, a refused inherited deadline, a count of nested
//!   give-ups) and the retry budget nearest the dependency, which a nested
//!   layer reports so that an enclosing layer asks it before retrying (kept
//!   in a second thread-local, touched only by frames that hold one);
//! * time in integer nanoseconds for the budget's atomics (a thread-local
//!   cache of the conversion), which the breaker also converts to only
//!   when a record needs it (a time-based window, a trip, a probe);
//! * a budget window with exact running totals (two read-modify-writes per
//!   request), where the sketch has one tagged bucket per second (one).
//!
//! And off the success path the sketches are simpler: one half-open probe
//! decides (the library admits 10 and judges them by the thresholds); no
//! time-based window, forced or disabled states, `Retry-After` holds, events,
//! snapshots or refusal counters; a timer only for a call's own deadline or
//! timeout (the library also times an inherited deadline, and tells the
//! enclosing attempt its deadline refused the call, so that layer counts it
//! as its own timeout, and its breaker counts the cut call as a failure,
//! where a sketch cut by an enclosing timer records nothing); no
//! `Retry-After` floor on a backoff; a retry budget
//! that checks, then counts (racing retries may overrun it by one each;
//! the library grants by compare-and-swap) and no token bucket; a bulkhead
//! that never waits for a slot; a graceful shutdown that is a flag (the
//! library counts calls in flight once one is installed; this benchmark
//! installs none); no `observe`, fallback, `with_deadline`, `admitted` or
//! `propagate` frames.

use std::alloc::System;
use std::any::Any;
use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, LazyLock, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use resilient::{BreakerConfig, BudgetConfig, BulkheadConfig, Registry, resilient};
use resilient_benches::{
    COUNTED, SAMPLE, SAMPLED, SAMPLES, Settings, Table, Timing, Turns, WARM_UP, WARMED,
    allowed_cpus, at_depth, concurrent_samples, fmt_num, fmt_ratio, locked_versions, machine,
    measure, median, parallelism, pin_to, poll_to_end, run_iters,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tower::{Service, ServiceBuilder};

mod floor;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

// ---------------------------------------------------------------------------
// The operation every case wraps.

/// The error of the benchmarked operation: never produced, but it must be
/// all each wrapper asks of an error (tower's `Timeout` boxes it, so it is
/// a `std::error::Error`; `resilient` classifies it).
#[derive(Debug, Clone)]
struct E;

impl fmt::Display for E {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the benchmarked call never fails")
    }
}

impl StdError for E {}

impl From<resilient::Error> for E {
    fn from(_: resilient::Error) -> Self {
        E
    }
}

impl resilient::Classify for E {
    fn classify(&self) -> resilient::Classification {
        resilient::Classification::Transient
    }
}

impl From<floor::Refusal> for E {
    fn from(_: floor::Refusal) -> Self {
        E
    }
}

impl floor::Transient for E {
    fn is_transient(&self) -> bool {
        true
    }
}

async fn bare(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

#[resilient(deadline_ms = 1000)]
async fn r_deadline(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

#[resilient(retries = 3, idempotent)]
async fn r_retries(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

#[resilient(breaker = "bench")]
async fn r_breaker(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

#[resilient(
    retries = 3,
    idempotent,
    breaker = "bench",
    deadline_ms = 1000,
    timeout_ms = 500,
    bulkhead = "bench"
)]
async fn r_full(x: u64) -> Result<u64, E> {
    Ok(black_box(x) + 1)
}

/// The value of a call that must succeed.
fn ok<T, Er>(r: Result<T, Er>) -> T {
    match r {
        Ok(v) => v,
        Err(_) => panic!("a benchmarked call failed: the wrapper refused it"),
    }
}

/// One call through a tower service, readiness polled by hand (what
/// `svc.ready().await?.call(x)` does, minus the extra future).
#[inline]
fn call_service<S: Service<u64, Response = u64>>(svc: &mut S, x: u64) -> u64 {
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match svc.poll_ready(&mut cx) {
            Poll::Ready(r) => break ok(r),
            Poll::Pending => std::hint::spin_loop(),
        }
    }
    ok(poll_to_end(svc.call(x)))
}

/// tower's `Retry` needs a policy; this one retries any error up to three
/// times at once, as `retries = 3` would without its backoff. On the success
/// path only `retry`'s `Ok` arm and the request clone run.
#[derive(Debug, Clone, Copy)]
struct Attempts(u8);

impl<Er> tower::retry::Policy<u64, u64, Er> for Attempts {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _: &mut u64, result: &mut Result<u64, Er>) -> Option<Self::Future> {
        match result {
            Ok(_) => None,
            Err(_) if self.0 == 0 => None,
            Err(_) => {
                self.0 -= 1;
                Some(std::future::ready(()))
            }
        }
    }

    fn clone_request(&mut self, req: &u64) -> Option<u64> {
        Some(*req)
    }
}

/// A value shared by every thread that runs a case, created by the first.
/// Type-erased so the unnameable types (services around an `async fn`) can
/// live in a static.
fn shared<T: Clone + Send + Sync + 'static>(
    slot: &'static OnceLock<Box<dyn Any + Send + Sync>>,
    make: impl FnOnce() -> T,
) -> T {
    slot.get_or_init(|| Box::new(make()))
        .downcast_ref::<T>()
        .expect("one type per slot")
        .clone()
}

static COUNTER: AtomicU64 = AtomicU64::new(0);
static RECLOSER: LazyLock<recloser::AsyncRecloser> =
    LazyLock::new(|| recloser::AsyncRecloser::from(recloser::Recloser::default()));
static FAILSAFE: OnceLock<Box<dyn Any + Send + Sync>> = OnceLock::new();
static TR_BREAKER: OnceLock<Box<dyn Any + Send + Sync>> = OnceLock::new();

// ---------------------------------------------------------------------------
// The cases.

/// What a case is run for: timed samples, or a fixed number of calls.
enum Mode<'a> {
    Time {
        warm_up: Duration,
        sample: Duration,
        samples: usize,
        sync: &'a (dyn Fn(u8) + Sync),
    },
    Iters(u64),
}

impl Mode<'_> {
    fn drive<F: FnMut(u64) -> u64>(self, call: F) -> Timing {
        match self {
            Mode::Time {
                warm_up,
                sample,
                samples,
                sync,
            } => measure(warm_up, sample, samples, GLOBAL, sync, call),
            Mode::Iters(n) => {
                black_box(run_iters(n, call));
                Timing::default()
            }
        }
    }
}

struct Case {
    id: &'static str,
    label: &'static str,
    /// Measured again on two threads sharing the case's state.
    two_threads: bool,
    run: fn(Mode<'_>) -> Timing,
}

const CASES: &[Case] = &[
    Case {
        id: "bare",
        label: "floor: bare `async fn` call",
        two_threads: true,
        run: |m| m.drive(|x| ok(poll_to_end(bare(x)))),
    },
    Case {
        id: "instant_now",
        label: "floor: `tokio::time::Instant::now()`",
        two_threads: false,
        run: |m| {
            m.drive(|x| {
                black_box(tokio::time::Instant::now());
                x
            })
        },
    },
    Case {
        id: "atomic_rmw",
        label: "floor: atomic `fetch_add` (shared counter)",
        two_threads: true,
        run: |m| m.drive(|x| COUNTER.fetch_add(x, Ordering::Relaxed)),
    },
    Case {
        id: "resilient_deadline",
        label: "resilient `deadline_ms = 1000`",
        two_threads: false,
        run: |m| m.drive(|x| ok(poll_to_end(r_deadline(x)))),
    },
    Case {
        id: "resilient_retries",
        label: "resilient `retries = 3, idempotent`",
        two_threads: false,
        run: |m| m.drive(|x| ok(poll_to_end(r_retries(x)))),
    },
    Case {
        id: "resilient_breaker",
        label: "resilient `breaker` (closed)",
        two_threads: true,
        run: |m| m.drive(|x| ok(poll_to_end(r_breaker(x)))),
    },
    Case {
        id: "resilient_full",
        label: "resilient retries+breaker+budget+deadline+timeout+bulkhead",
        two_threads: true,
        run: |m| m.drive(|x| ok(poll_to_end(r_full(x)))),
    },
    Case {
        id: "floor_deadline",
        label: "floor sketch: `deadline_ms` semantics by hand",
        two_threads: false,
        run: |m| m.drive(|x| ok(poll_to_end(floor::deadline(move || bare(x))))),
    },
    Case {
        id: "floor_retries",
        label: "floor sketch: `retries` semantics by hand",
        two_threads: false,
        run: |m| m.drive(|x| ok(poll_to_end(floor::retries(move || bare(x))))),
    },
    Case {
        id: "floor_breaker",
        label: "floor sketch: `breaker` semantics by hand",
        two_threads: true,
        run: |m| m.drive(|x| ok(poll_to_end(floor::breaker(move || bare(x))))),
    },
    Case {
        id: "floor_full",
        label: "floor sketch: full-stack semantics by hand",
        two_threads: true,
        run: |m| m.drive(|x| ok(poll_to_end(floor::full(move || bare(x))))),
    },
    Case {
        id: "floor_retries_traced",
        label: "floor sketch: `retries` by hand, in a `tracing` span",
        two_threads: false,
        run: |m| m.drive(|x| ok(poll_to_end(floor::retries_traced(move || bare(x))))),
    },
    Case {
        id: "floor_deadline_traced",
        label: "floor sketch: `deadline_ms` by hand, in a `tracing` span",
        two_threads: false,
        run: |m| m.drive(|x| ok(poll_to_end(floor::deadline_traced(move || bare(x))))),
    },
    Case {
        id: "floor_breaker_traced",
        label: "floor sketch: `breaker` by hand, in a `tracing` span",
        two_threads: false,
        run: |m| m.drive(|x| ok(poll_to_end(floor::breaker_traced(move || bare(x))))),
    },
    Case {
        id: "floor_full_traced",
        label: "floor sketch: full stack by hand, in a `tracing` span",
        two_threads: false,
        run: |m| m.drive(|x| ok(poll_to_end(floor::full_traced(move || bare(x))))),
    },
    Case {
        id: "floor_breaker_unclocked",
        label: "lower bound: the `breaker` sketch with no clock read",
        two_threads: true,
        run: |m| m.drive(|x| ok(poll_to_end(floor::breaker_unclocked(move || bare(x))))),
    },
    Case {
        id: "floor_full_unclocked",
        label: "lower bound: the full sketch without timing calls for the breaker",
        two_threads: true,
        run: |m| m.drive(|x| ok(poll_to_end(floor::full_unclocked(move || bare(x))))),
    },
    Case {
        id: "tower_retry",
        label: "tower `Retry`",
        two_threads: false,
        run: |m| {
            let mut svc = tower::retry::Retry::new(Attempts(3), tower::service_fn(bare));
            m.drive(|x| call_service(&mut svc, x))
        },
    },
    Case {
        id: "tower_timeout",
        label: "tower `Timeout`",
        two_threads: false,
        run: |m| {
            let mut svc =
                tower::timeout::Timeout::new(tower::service_fn(bare), Duration::from_millis(1000));
            m.drive(|x| call_service(&mut svc, x))
        },
    },
    Case {
        id: "tower_limit",
        label: "tower `ConcurrencyLimit`",
        two_threads: false,
        run: |m| {
            let mut svc = tower::limit::ConcurrencyLimit::new(tower::service_fn(bare), 64);
            m.drive(|x| call_service(&mut svc, x))
        },
    },
    Case {
        id: "tower_stack",
        label: "tower retry+timeout+concurrency-limit",
        two_threads: false,
        run: |m| {
            let mut svc = ServiceBuilder::new()
                .retry(Attempts(3))
                .timeout(Duration::from_millis(500))
                .concurrency_limit(64)
                .service_fn(bare);
            m.drive(|x| call_service(&mut svc, x))
        },
    },
    Case {
        id: "backon_retry",
        label: "backon retry (`ExponentialBuilder`, tokio sleep)",
        two_threads: false,
        run: |m| {
            use backon::Retryable;
            m.drive(|x| {
                ok(poll_to_end(
                    (|| bare(x))
                        .retry(backon::ExponentialBuilder::default())
                        .sleep(tokio::time::sleep),
                ))
            })
        },
    },
    Case {
        id: "failsafe_breaker",
        label: "failsafe breaker (futures)",
        two_threads: true,
        run: |m| {
            use failsafe::futures::CircuitBreaker;
            let cb = shared(&FAILSAFE, || failsafe::Config::new().build());
            m.drive(|x| ok(poll_to_end(cb.call(bare(x)))))
        },
    },
    Case {
        id: "recloser_breaker",
        label: "recloser `AsyncRecloser`",
        two_threads: true,
        run: |m| {
            let cb = RECLOSER.clone();
            m.drive(|x| ok(poll_to_end(cb.call(bare(x)))))
        },
    },
    Case {
        id: "tr_breaker",
        label: "tower-resilience breaker",
        two_threads: true,
        run: |m| {
            let mut svc = shared(&TR_BREAKER, || {
                ServiceBuilder::new()
                    .layer(
                        tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
                            .build()
                            .expect("valid breaker"),
                    )
                    .service_fn(bare)
            });
            m.drive(|x| call_service(&mut svc, x))
        },
    },
    Case {
        id: "tr_stack",
        label: "tower-resilience bulkhead+breaker+retry+time-limiter",
        two_threads: false,
        run: |m| {
            use tower_resilience::timelimiter::TimeLimiterError;
            let mut svc = ServiceBuilder::new()
                .layer(
                    tower_resilience::bulkhead::BulkheadLayer::builder()
                        .max_concurrent_calls(64)
                        .build()
                        .expect("valid bulkhead"),
                )
                .layer(
                    tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
                        .build()
                        .expect("valid breaker"),
                )
                .layer(
                    tower_resilience::retry::RetryLayer::<u64, u64, TimeLimiterError<E>>::builder()
                        .max_attempts(4)
                        .exponential_backoff(Duration::from_millis(100))
                        .build(),
                )
                .layer(
                    tower_resilience::timelimiter::TimeLimiterLayer::builder()
                        .timeout_duration(Duration::from_millis(500))
                        .build(),
                )
                .service_fn(bare);
            m.drive(|x| call_service(&mut svc, x))
        },
    },
];

/// One comparison the performance issue sets a target on (or shows next to
/// one): the resilient case over the peer's, and the floor sketch of the
/// same semantics over the same peer.
struct Ratio {
    what: &'static str,
    ours: &'static str,
    floor: &'static str,
    peer: &'static str,
    target: Option<f64>,
}

const RATIOS: &[Ratio] = &[
    Ratio {
        what: "full stack vs tower retry+timeout+concurrency-limit",
        ours: "resilient_full",
        floor: "floor_full",
        peer: "tower_stack",
        target: Some(0.6),
    },
    Ratio {
        what: "full stack vs tower stack, sketch in a `tracing` span",
        ours: "resilient_full",
        floor: "floor_full_traced",
        peer: "tower_stack",
        target: Some(0.6),
    },
    Ratio {
        what: "full stack vs tower stack, lower bound (no slow-call timing)",
        ours: "resilient_full",
        floor: "floor_full_unclocked",
        peer: "tower_stack",
        target: Some(0.6),
    },
    Ratio {
        what: "`retries` vs backon",
        ours: "resilient_retries",
        floor: "floor_retries",
        peer: "backon_retry",
        target: Some(1.0),
    },
    Ratio {
        what: "`retries` vs backon, sketch in a `tracing` span (default feature)",
        ours: "resilient_retries",
        floor: "floor_retries_traced",
        peer: "backon_retry",
        target: Some(1.0),
    },
    Ratio {
        what: "`retries` vs tower `Retry`",
        ours: "resilient_retries",
        floor: "floor_retries",
        peer: "tower_retry",
        target: None,
    },
    Ratio {
        what: "`deadline_ms` vs tower `Timeout`",
        ours: "resilient_deadline",
        floor: "floor_deadline",
        peer: "tower_timeout",
        target: Some(1.0),
    },
    Ratio {
        what: "`deadline_ms` vs tower `Timeout`, sketch in a `tracing` span",
        ours: "resilient_deadline",
        floor: "floor_deadline_traced",
        peer: "tower_timeout",
        target: Some(1.0),
    },
    Ratio {
        what: "`breaker` vs recloser",
        ours: "resilient_breaker",
        floor: "floor_breaker",
        peer: "recloser_breaker",
        target: Some(0.5),
    },
    Ratio {
        what: "`breaker` vs recloser, sketch in a `tracing` span",
        ours: "resilient_breaker",
        floor: "floor_breaker_traced",
        peer: "recloser_breaker",
        target: Some(0.5),
    },
    Ratio {
        what: "`breaker` vs recloser, lower bound (no clock read)",
        ours: "resilient_breaker",
        floor: "floor_breaker_unclocked",
        peer: "recloser_breaker",
        target: Some(0.5),
    },
    Ratio {
        what: "`breaker` vs failsafe",
        ours: "resilient_breaker",
        floor: "floor_breaker",
        peer: "failsafe_breaker",
        target: None,
    },
    Ratio {
        what: "`breaker` vs tower-resilience breaker",
        ours: "resilient_breaker",
        floor: "floor_breaker",
        peer: "tr_breaker",
        target: None,
    },
    Ratio {
        what: "full stack vs tower-resilience stack",
        ours: "resilient_full",
        floor: "floor_full",
        peer: "tr_stack",
        target: None,
    },
];

/// The two-thread comparison with a target: each thread's time per call
/// through one shared breaker over the one-thread time; and the same of the
/// breaker's floor sketch.
const TWO_THREAD_TARGET: (&str, &str, f64) = ("resilient_breaker", "floor_breaker", 1.5);

fn case(id: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.id == id)
}

// ---------------------------------------------------------------------------
// Running.

fn install_registry() -> Result<(), Box<dyn StdError>> {
    // As production runs: the global registry installed once at start-up,
    // with the parts the cases name configured explicitly (their defaults).
    Registry::builder()
        .breaker("bench", BreakerConfig::default())
        .budget("bench", BudgetConfig::default())
        .bulkhead("bench", BulkheadConfig::default())
        .build()?
        .install()?;
    Ok(())
}

/// The resilient cases really went through the configured breaker "bench",
/// and it stayed closed: otherwise the figures would be of another path.
fn check_breaker() -> Result<(), Box<dyn StdError>> {
    let snap = Registry::global()
        .breaker("bench")
        .ok_or("the breaker `bench` is not in the global registry")?
        .snapshot();
    if snap.state != resilient::State::Closed
        || snap.buffered_calls == 0
        || snap.failed_calls != 0
        || snap.not_permitted_calls != 0
    {
        return Err(format!(
            "the breaker `bench` was not a closed breaker seeing successes: {snap:?}"
        )
        .into());
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

/// Two threads run the case at once, each with its own runtime, sharing the
/// case's state. Returns each thread's timing and the allocations per call
/// over both threads, counted while both call.
fn two_threads(c: &Case, settings: &Settings, pins: [Option<usize>; 2]) -> ([Timing; 2], f64) {
    let barrier = Barrier::new(3);
    // measure() calls sync(WARMED) before its allocation count,
    // sync(COUNTED) after it, sync(SAMPLES) before its samples. Two waits at
    // WARMED let this thread start the count between them, once both
    // threads have warmed up.
    let sync = |phase: u8| match phase {
        WARMED => {
            barrier.wait();
            barrier.wait();
        }
        COUNTED | SAMPLES => {
            barrier.wait();
        }
        _ => {}
    };
    std::thread::scope(|s| {
        let threads: Vec<_> = pins
            .into_iter()
            .map(|pin| {
                let sync = &sync;
                s.spawn(move || on_thread(c, settings, pin, sync))
            })
            .collect();
        barrier.wait();
        let region = Region::new(GLOBAL);
        barrier.wait();
        barrier.wait();
        let allocations = region.change().allocations;
        barrier.wait();
        let t: Vec<Timing> = threads
            .into_iter()
            .map(|t| t.join().expect("a bench thread panicked"))
            .collect();
        let calls = (t[0].iters_per_sample + t[1].iters_per_sample) as f64;
        let [a, b]: [Timing; 2] = t.try_into().expect("two threads");
        ([a, b], allocations as f64 / calls)
    })
}

/// A two-thread figure is given only from a process whose threads both
/// took this many samples while the other was on a CPU too.
const MIN_CONCURRENT: usize = 5;

/// How many processes measure each case: `PEERS_PROCS`, else two per CPU
/// pinned to (one for a quick run), or 3 (1) unpinned.
fn processes(quick: bool, cpus: usize) -> Result<usize, Box<dyn StdError>> {
    match std::env::var("PEERS_PROCS") {
        Err(std::env::VarError::NotPresent) => Ok(match (quick, cpus) {
            (true, 0) => 1,
            (false, 0) => 3,
            (true, n) => n,
            (false, n) => 2 * n,
        }),
        Err(e) => Err(format!("PEERS_PROCS: {e}").into()),
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("PEERS_PROCS: `{v}` is not a number of processes (1 or more)").into()),
        },
    }
}

/// What one process measured of a case on two threads sharing its state.
struct TwoRun {
    /// Each thread's median over its samples taken while the other ran too
    /// (`NaN` with fewer than `MIN_CONCURRENT` of them).
    m: [f64; 2],
    /// Each thread's median over its samples taken alone, in the same
    /// rounds.
    alone: [f64; 2],
    /// Each thread's ratio of the bare call's figures, with the other
    /// thread and alone, in the same rounds (`NaN` for the bare call
    /// itself).
    control: [f64; 2],
    /// How many samples that was, per thread.
    counts: [usize; 2],
    parallelism: f64,
    allocs_per_call: f64,
    /// The CPU each thread was pinned to (set by the parent, which chose
    /// them).
    cpus: [Option<usize>; 2],
}

/// The CPUs the measuring processes are pinned to, in turn: those this
/// process may run on, the first [`MAX_PINNED`] of them; none (every
/// thread free to move) on a single CPU or with `PEERS_PIN=0`.
///
/// On the README's machine the same code ran at two speeds (the breaker
/// case at 97 or 160 ns), at times on one CPU only, at times on both, and
/// a thread free to move met them in proportions that changed from run to
/// run. Pinned, each process's cases share one CPU's speeds, the table
/// shows each CPU's figures (whether the CPUs differ), and a two-thread
/// thread is compared with itself alone on the same CPU.
fn pinning() -> Result<Vec<usize>, Box<dyn StdError>> {
    if std::env::var("PEERS_PIN").is_ok_and(|v| v == "0") {
        return Ok(Vec::new());
    }
    let mut cpus = allowed_cpus().map_err(|e| format!("reading this process's CPUs: {e}"))?;
    cpus.truncate(MAX_PINNED);
    Ok(if cpus.len() >= 2 { cpus } else { Vec::new() })
}

/// At most this many CPUs take turns measuring (two processes each by
/// default): enough to show whether CPUs differ, few enough for a run on
/// a large machine to stay short.
const MAX_PINNED: usize = 4;

/// A child's spec with the CPUs it is pinned to: `one@1`, `two:<id>@0,1`.
fn pinned_spec(spec: &str, cpus: &[usize]) -> String {
    if cpus.is_empty() {
        return spec.to_owned();
    }
    let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
    format!("{spec}@{}", list.join(","))
}

/// [`pinned_spec`] read back.
fn spec_cpus(spec: &str) -> Result<(&str, Vec<usize>), Box<dyn StdError>> {
    let Some((what, list)) = spec.split_once('@') else {
        return Ok((spec, Vec::new()));
    };
    let cpus = list
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("PEERS_CHILD: `{spec}`: CPUs: {e}"))?;
    Ok((what, cpus))
}

/// A CPU's name in the tables: `CPU 1`, or `any` when unpinned.
fn cpu_name(cpu: Option<usize>) -> String {
    cpu.map_or_else(|| "any".to_owned(), |c| format!("CPU {c}"))
}

fn numbers<const N: usize>(line: &str) -> Option<[f64; N]> {
    let xs: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    xs.try_into().ok()
}

/// A one-thread timing as a child prints it, and its parent reads it
/// back: the median, the minimum and the allocations per call.
fn timing_line(t: &Timing) -> String {
    format!("{} {} {}", t.median_ns, t.min_ns, t.allocs_per_call)
}

/// [`timing_line`] read back.
fn timing_of(line: &str) -> Option<Timing> {
    let [median_ns, min_ns, allocs_per_call] = numbers(line)?;
    Some(Timing {
        median_ns,
        min_ns,
        allocs_per_call,
        ..Timing::default()
    })
}

impl TwoRun {
    fn write(&self) -> String {
        format!(
            "{} {} {} {} {} {} {} {} {} {}",
            self.m[0],
            self.m[1],
            self.alone[0],
            self.alone[1],
            self.control[0],
            self.control[1],
            self.counts[0],
            self.counts[1],
            self.parallelism,
            self.allocs_per_call
        )
    }

    fn read(line: &str) -> Option<Self> {
        let [m0, m1, a0, a1, k0, k1, c0, c1, parallelism, allocs_per_call] = numbers(line)?;
        Some(TwoRun {
            m: [m0, m1],
            alone: [a0, a1],
            control: [k0, k1],
            counts: [c0 as usize, c1 as usize],
            parallelism,
            allocs_per_call,
            cpus: [None, None],
        })
    }
}

/// The prefix of a child's result lines.
const CHILD_LINE: &str = "peers-child: ";

/// Runs `PEERS_CHILD=<spec>` in a new process of this binary and returns
/// its result lines.
fn in_child(spec: &str) -> Result<Vec<String>, Box<dyn StdError>> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .env("PEERS_CHILD", spec)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("measuring `{spec}` failed: {}", out.status).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix(CHILD_LINE))
        .map(str::to_owned)
        .collect())
}

/// `PEERS_CHILD=one`: every case on one thread, taking turns
/// (`all_cases`); `PEERS_CHILD=two:<id>`: one case on two threads; either
/// pinned as [`pinned_spec`] writes it (`one@1`: every thread on CPU 1;
/// `two:<id>@0,1`: the first thread on CPU 0, the second on CPU 1). Checks
/// that the cases ran the path they are named for, and prints the results
/// for the parent.
fn child(spec: &str, settings: &Settings) -> Result<(), Box<dyn StdError>> {
    let (spec, cpus) = spec_cpus(spec)?;
    if spec == "one" {
        // The case threads, started after this, inherit it.
        if let Some(&cpu) = cpus.first() {
            pin_to(cpu).map_err(|e| format!("pinning to CPU {cpu}: {e}"))?;
        }
        let timings = all_cases(settings);
        check_breaker()?;
        floor::check()?;
        for (c, t) in CASES.iter().zip(&timings) {
            println!("{CHILD_LINE}{} {}", c.id, timing_line(t));
        }
        return Ok(());
    }
    let Some(id) = spec.strip_prefix("two:") else {
        return Err(format!("PEERS_CHILD: `{spec}` is not `one` or `two:<case>`").into());
    };
    let c = case(id).ok_or_else(|| format!("no case `{id}`; `PEERS_LIST=1` lists them"))?;
    let run = two_run(c, settings, [cpus.first().copied(), cpus.get(1).copied()]);
    check_ran(c)?;
    println!("{CHILD_LINE}{}", run.write());
    Ok(())
}

/// How many rounds a two-thread run takes: in each, the case runs on
/// each thread alone, then on both at once.
const TWO_ROUNDS: usize = 10;

/// Case `c` on two threads sharing its state, in this process, each thread
/// pinned as `pins` says, next to the same case on each of those threads
/// alone.
///
/// The run is [`TWO_ROUNDS`] rounds of three phases: thread 0 alone,
/// thread 1 alone, both at once (a third of the samples each). The speed
/// of this machine's CPUs changes with what else its host runs, for tens
/// of milliseconds to minutes at a time; taking the phases in turn, each
/// thread's figure alone and with the other thread meet the same states,
/// so their ratio is what the second thread costs.
fn two_run(c: &Case, settings: &Settings, pins: [Option<usize>; 2]) -> TwoRun {
    let round = Settings {
        warm_up: settings.warm_up / TWO_ROUNDS as u32,
        two_thread_samples: (settings.two_thread_samples / (3 * TWO_ROUNDS)).max(1),
        ..*settings
    };
    // The control: the bare call, which shares nothing, in the same
    // rounds. What two threads at once cost it is the machine's doing
    // (two busy CPUs sharing a core, or the host), not sharing.
    let control = case("bare").filter(|b| b.id != c.id);
    // Whether the threads get to run at once depends on what else the
    // machine runs; a run where they hardly did is tried again, twice.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut main = Collected::default();
        let mut ctrl = Collected::default();
        for r in 0..TWO_ROUNDS {
            // Alone first in even rounds, together first in odd ones, so
            // that neither phase always follows the other; each phase of
            // the case, then of the control.
            let mut phases = [Phase::Alone(0), Phase::Alone(1), Phase::Both];
            if r % 2 == 1 {
                phases.reverse();
            }
            for phase in phases {
                main.phase(c, &round, pins, phase);
                if let Some(control) = control {
                    ctrl.phase(control, &round, pins, phase);
                }
            }
        }
        let enough = main.both.iter().all(|xs| xs.len() >= MIN_CONCURRENT);
        if attempt < 3 && !enough {
            eprintln!("    {}: the threads hardly ran at once; again", c.id);
            continue;
        }
        let counts = [main.both[0].len(), main.both[1].len()];
        let (m, alone) = main.medians();
        let (cm, calone) = ctrl.medians();
        let at_once = main.timings.iter().map(|t| parallelism(t)).sum::<f64>() / TWO_ROUNDS as f64;
        return TwoRun {
            m,
            alone,
            control: [cm[0] / calone[0], cm[1] / calone[1]],
            counts,
            parallelism: at_once,
            allocs_per_call: main.allocs,
            cpus: pins,
        };
    }
}

/// What the phases of [`two_run`] collected of one case.
#[derive(Default)]
struct Collected {
    /// Per thread, its samples alone (those on a CPU).
    alone: [Vec<f64>; 2],
    /// Per thread, its samples while the other thread ran too.
    both: [Vec<f64>; 2],
    timings: Vec<[Timing; 2]>,
    allocs: f64,
}

impl Collected {
    fn phase(&mut self, c: &Case, round: &Settings, pins: [Option<usize>; 2], phase: Phase) {
        match phase {
            Phase::Alone(i) => {
                // Samples on a CPU, as the two-thread ones are.
                let t = thread_alone(c, round, pins[i]);
                let on_cpu = t.samples.iter().filter(|s| s.on_cpu());
                self.alone[i].extend(on_cpu.map(|s| s.ns_per_call));
            }
            Phase::Both => {
                let (t, a) = two_threads(c, round, pins);
                self.allocs = self.allocs.max(a);
                self.both[0].extend(concurrent_samples(&t[0], &t[1]));
                self.both[1].extend(concurrent_samples(&t[1], &t[0]));
                self.timings.push(t);
            }
        }
    }

    /// Per thread: the median with the other thread running (`NaN` from
    /// fewer than `MIN_CONCURRENT` samples), and alone.
    fn medians(&self) -> ([f64; 2], [f64; 2]) {
        let both = self.both.clone().map(|xs| {
            if xs.len() >= MIN_CONCURRENT {
                median(xs)
            } else {
                f64::NAN
            }
        });
        (both, self.alone.clone().map(median))
    }
}

/// A case on two threads, for a CPU (or unpinned): the medians of the
/// threads' figures together and alone, and of their ratios.
#[derive(Clone, Copy)]
struct TwoFigure {
    two: f64,
    alone: f64,
    ratio: f64,
    /// The median of each thread's ratio over its control's (the bare
    /// call's in the same rounds): what sharing the case's state costs,
    /// net of what two busy CPUs cost any code on this machine.
    net: f64,
}

/// Case `c` for `settings`' two-thread samples on the calling thread (a
/// new one), pinned to `pin`, with `sync` at `measure`'s phases.
fn on_thread(
    c: &Case,
    settings: &Settings,
    pin: Option<usize>,
    sync: &(dyn Fn(u8) + Sync),
) -> Timing {
    if let Some(cpu) = pin {
        pin_to(cpu).unwrap_or_else(|e| panic!("pinning to CPU {cpu}: {e}"));
    }
    let rt = runtime();
    let _guard = rt.enter();
    (c.run)(Mode::Time {
        warm_up: settings.warm_up,
        sample: settings.two_thread_sample,
        samples: settings.two_thread_samples,
        sync,
    })
}

/// A phase of a round of [`two_run`].
#[derive(Clone, Copy)]
enum Phase {
    /// Thread 0 or 1 alone.
    Alone(usize),
    /// Both threads at once.
    Both,
}

/// Case `c` on one new thread, pinned to `pin`, for `settings`' two-thread
/// samples: the figure alone that [`two_run`] sets each thread's against.
fn thread_alone(c: &Case, settings: &Settings, pin: Option<usize>) -> Timing {
    std::thread::scope(|s| {
        s.spawn(|| on_thread(c, settings, pin, &|_| {}))
            .join()
            .expect("a bench thread panicked")
    })
}

/// Every case on one thread, each on a thread of its own, taking turns
/// ([`Turns`]): one warm-up and allocation count each, then one sample
/// each, round after round. On the README's machine the same code ran at
/// one of two speeds for tens of milliseconds at a time (the peers too:
/// recloser at 17 or 27 ns), so cases measured one after the other could
/// meet different states; taking turns, every case meets the same ones.
fn all_cases(settings: &Settings) -> Vec<Timing> {
    let turns = Turns::new(CASES.len());
    // Every thread has made its runtime and its case (all of which
    // allocate) before the first turn: one case's allocation count never
    // sees another's set-up. Every case reaches `WARM_UP` once, through
    // `Mode::drive`.
    let set_up = Barrier::new(CASES.len());
    std::thread::scope(|s| {
        let threads: Vec<_> = CASES
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let (turns, set_up) = (&turns, &set_up);
                s.spawn(move || {
                    let rt = runtime();
                    let _guard = rt.enter();
                    // See `measure` for the phases.
                    let sync = move |phase: u8| match phase {
                        WARM_UP => {
                            set_up.wait();
                            turns.wait(k);
                        }
                        SAMPLE => turns.wait(k),
                        COUNTED | SAMPLED => turns.pass(k),
                        _ => {}
                    };
                    (c.run)(Mode::Time {
                        warm_up: settings.warm_up,
                        sample: settings.sample,
                        samples: settings.samples,
                        sync: &sync,
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a bench thread panicked"))
            .collect()
    })
}

/// A case that names the breaker (the library's or the sketches') really
/// went through it, and it stayed closed: otherwise the figures are of
/// another path.
fn check_ran(c: &Case) -> Result<(), Box<dyn StdError>> {
    if c.id.starts_with("resilient_breaker") || c.id.starts_with("resilient_full") {
        check_breaker()?;
    }
    if c.id.starts_with("floor_breaker") || c.id.starts_with("floor_full") {
        floor::check()?;
    }
    Ok(())
}

/// The range of ratios, `1.02x–1.10x`.
fn fmt_spread_ratio(xs: &[f64]) -> String {
    spread(xs, fmt_ratio)
}

/// The range of a case's figures over processes, `28.1–57.0`.
fn fmt_spread(xs: &[f64]) -> String {
    spread(xs, fmt_num)
}

/// The range of `xs`, each end written by `fmt`; `-` if empty.
fn spread(xs: &[f64], fmt: fn(f64) -> String) -> String {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if xs.is_empty() {
        "-".to_owned()
    } else {
        format!("{}–{}", fmt(lo), fmt(hi))
    }
}

fn output_path() -> Option<PathBuf> {
    let given = std::env::var_os("PEERS_MD")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::args()
                .skip(1)
                .find(|a| !a.starts_with('-'))
                .map(PathBuf::from)
        })?;
    Some(if given.is_relative() {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(given)
    } else {
        given
    })
}

fn header(what: &str) -> String {
    let versions = locked_versions(
        include_str!("../../Cargo.lock"),
        &[
            "tokio",
            "tower",
            "backon",
            "failsafe",
            "recloser",
            "tower-resilience",
        ],
    );
    format!("{what}\n\nMachine: {}. Peers: {versions}.\n", machine())
}

/// The ratio tables: each comparison's resilient figure over the peer's,
/// its target, and the floor sketch's figure over the same peer. A target
/// below the sketch's ratio is below what the semantics allow.
/// What the tables say of the floor sketches.
const FLOOR_NOTE: &str = "The floor sketches (`benches/benches/floor/mod.rs`) \
    are the same semantics written by hand for speed, without telemetry (no \
    `tracing` span, no metrics), measured in the same run: a floor sketch ratio \
    is the sketch's figure over the same peer's, and a target below it asks for \
    less than the semantics allow. `benches/peers.rs` lists what the library \
    does that the sketches do not.";

/// `value` gives a case's figure; `ratio(a, b)` the ratio of case `a`'s
/// figure to case `b`'s (for CPU time: the median over processes of each
/// process's ratio, since within a process the cases met the same
/// conditions).
fn ratio_table(
    value: &dyn Fn(&str) -> Option<f64>,
    ratio: &dyn Fn(&str, &str) -> f64,
    unit: &str,
) -> Table {
    let mut t = Table::new(&[
        "comparison",
        &format!(">resilient {unit}"),
        &format!(">peer {unit}"),
        ">ratio",
        ">target",
        &format!(">floor sketch {unit}"),
        ">floor sketch ratio",
    ]);
    for r in RATIOS {
        let (ours, peer, floor) = (value(r.ours), value(r.peer), value(r.floor));
        t.row(ratio_row(
            r.what,
            (ours, peer, ratio(r.ours, r.peer)),
            (floor, ratio(r.floor, r.peer)),
            r.target,
            true,
        ));
    }
    t
}

/// One row of a ratio table: `ours` next to `base` (the peer's figure)
/// and their `ratio` (the one the target is on), and the floor sketch's
/// figure and ratio. `bounds`: the floor sketch's ratio bounds what the
/// target can ask (so the target cell says when it asks for less).
fn ratio_row(
    what: &str,
    (ours, base, ratio): (Option<f64>, Option<f64>, f64),
    (floor, floor_ratio): (Option<f64>, f64),
    target: Option<f64>,
    bounds: bool,
) -> Vec<String> {
    let cell = |x: Option<f64>| x.map_or("-".into(), fmt_num);
    vec![
        what.to_string(),
        cell(ours),
        cell(base),
        fmt_ratio(ratio),
        target.map_or(String::new(), |t: f64| {
            let met = if ratio.is_nan() {
                "not measured"
            } else if ratio <= t {
                "met"
            } else {
                "not met"
            };
            let below_floor = if bounds && floor_ratio > t {
                "; below the floor sketch"
            } else {
                ""
            };
            format!("≤ {t}x ({met}{below_floor})")
        }),
        cell(floor),
        fmt_ratio(floor_ratio),
    ]
}

fn write_out(text: &str) -> Result<(), Box<dyn StdError>> {
    print!("{text}");
    if let Some(path) = output_path() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, text)?;
        println!("\n(written to {})", path.display());
    }
    Ok(())
}

/// `PEERS_INSTRUCTIONS=<file>`: the file has `id instructions-per-call`
/// lines (from `benches/callgrind.sh`); render them as the tables.
fn render_instructions(file: &str) -> Result<(), Box<dyn StdError>> {
    let text = std::fs::read_to_string(file)?;
    let counts: HashMap<String, f64> = text
        .lines()
        .filter_map(|l| {
            let (id, n) = l.split_once(char::is_whitespace)?;
            Some((id.to_owned(), n.trim().parse().ok()?))
        })
        .collect();
    let mut t = Table::new(&["case", ">instructions/call"]);
    for c in CASES {
        if let Some(n) = counts.get(c.id) {
            t.row(vec![c.label.to_owned(), fmt_num(*n)]);
        }
    }
    let count = |id: &str| counts.get(id).copied();
    let over = |a: &str, b: &str| match (count(a), count(b)) {
        (Some(x), Some(y)) => x / y,
        _ => f64::NAN,
    };
    let ratios = ratio_table(&count, &over, "instr.");
    let out = format!(
        "{}\nInstructions per call, counted by callgrind (`benches/callgrind.sh`): \
         the difference between two runs of a case, divided by the difference \
         in calls. Deterministic, unlike CPU time on a shared machine; it does \
         not see cache misses, contention or slow instructions (an atomic RMW, \
         `rdtsc`), so it has no two-thread figure. Under valgrind a clock read \
         is a system call, not the vDSO: its user-space part counts (see the \
         `Instant::now()` row), the kernel's does not, so cases that read the \
         clock more cost more than their count says. {FLOOR_NOTE}\n\n{}\n{}",
        header("### Instructions per call"),
        t.markdown(),
        ratios.markdown()
    );
    write_out(&out)
}

fn main() -> Result<(), Box<dyn StdError>> {
    if std::env::var_os("PEERS_LIST").is_some() {
        for c in CASES {
            println!("{}", c.id);
        }
        return Ok(());
    }
    if let Ok(file) = std::env::var("PEERS_INSTRUCTIONS") {
        return render_instructions(&file);
    }
    install_registry()?;

    if let Ok(id) = std::env::var("PEERS_CASE") {
        let c = case(&id).ok_or_else(|| format!("no case `{id}`; `PEERS_LIST=1` lists them"))?;
        let iters: u64 = std::env::var("PEERS_ITERS")
            .map_err(|_| "PEERS_CASE needs PEERS_ITERS, the number of calls")?
            .parse()
            .map_err(|e| format!("PEERS_ITERS: {e}"))?;
        let rt = runtime();
        let _guard = rt.enter();
        // `PEERS_PAD=<n>`: at `n` frames deeper (`at_depth`), to compare
        // placements of the stack one at a time (with `setarch -R`).
        let pad = match std::env::var("PEERS_PAD") {
            Err(std::env::VarError::NotPresent) => 0,
            Err(e) => return Err(format!("PEERS_PAD: {e}").into()),
            Ok(v) => v.parse::<usize>().map_err(|e| format!("PEERS_PAD: {e}"))?,
        };
        at_depth(pad, &mut || {
            (c.run)(Mode::Iters(iters));
        });
        return check_ran(c);
    }

    let settings = Settings::from_env();
    if let Ok(spec) = std::env::var("PEERS_CHILD") {
        return child(&spec, &settings);
    }
    if let Ok(id) = std::env::var("PEERS_TWO") {
        // One case, on one thread and then on two sharing its state: for
        // comparing builds without the whole run.
        let c = case(&id).ok_or_else(|| format!("no case `{id}`; `PEERS_LIST=1` lists them"))?;
        let run = two_run(c, &settings, [None, None]);
        let ([m0, m1], [a0, a1]) = (run.m, run.alone);
        println!("{id}: two threads {m0:.1} and {m1:.1} ns, each alone {a0:.1} and {a1:.1} ns");
        return Ok(());
    }
    let quick = settings.quick;
    let cpus = pinning()?;
    let procs = processes(quick, cpus.len())?;
    let pinned = if cpus.is_empty() {
        "unpinned".to_owned()
    } else {
        let names: Vec<String> = cpus.iter().map(|&c| cpu_name(Some(c))).collect();
        format!("each pinned in turn to {}", names.join(", "))
    };
    eprintln!(
        "peers: {} cases, in {procs} processes ({pinned}): {} samples of ~{:?} each after \
         {:?} of warm-up{}",
        CASES.len(),
        settings.samples,
        settings.sample,
        settings.warm_up,
        if quick { " (PEERS_QUICK)" } else { "" }
    );

    // Every figure is taken in `procs` processes of its own, and the median
    // of their medians is reported. In each, the one-thread cases take
    // turns sample by sample (`all_cases`), all on one CPU; the two-thread
    // ones run one case per process, each thread on a CPU of its own.
    // Process `r` starts from CPU `r` (modulo), so that every CPU is
    // measured as often.
    let pin_at = |r: usize, k: usize| (!cpus.is_empty()).then(|| cpus[(r + k) % cpus.len()]);
    let mut ones: HashMap<&str, Vec<(Option<usize>, Timing)>> = HashMap::new();
    let mut twos: HashMap<&str, Vec<TwoRun>> = HashMap::new();
    for r in 0..procs {
        let (round, one_pin) = (r + 1, pin_at(r, 0));
        eprintln!(
            "  every case, taking turns (process {round} of {procs}, {})",
            cpu_name(one_pin)
        );
        for line in in_child(&pinned_spec("one", &Vec::from_iter(one_pin)))? {
            let (id, run) = line
                .split_once(' ')
                .and_then(|(id, rest)| Some((case(id)?.id, timing_of(rest)?)))
                .ok_or_else(|| format!("a child's result line is not understood: `{line}`"))?;
            ones.entry(id).or_default().push((one_pin, run));
        }
        let pins = [pin_at(r, 0), pin_at(r, 1)];
        for c in CASES.iter().filter(|c| c.two_threads) {
            eprintln!("  {} (two threads, process {round} of {procs})", c.id);
            let spec = pinned_spec(
                &format!("two:{}", c.id),
                &Vec::from_iter(pins.into_iter().flatten()),
            );
            let mut run = in_child(&spec)?
                .into_iter()
                .next()
                .and_then(|l| TwoRun::read(&l))
                .ok_or_else(|| format!("measuring `{}` on two threads gave no result", c.id))?;
            run.cpus = pins;
            twos.entry(c.id).or_default().push(run);
        }
    }

    // The CPUs figures are kept apart by: each pinned one, or `None` for
    // every figure of an unpinned run.
    let keys: Vec<Option<usize>> = if cpus.is_empty() {
        vec![None]
    } else {
        cpus.iter().copied().map(Some).collect()
    };
    let pinned_run = !cpus.is_empty();

    // One thread: the median over all processes, and over each CPU's.
    let mut one: HashMap<&str, Timing> = HashMap::new();
    let mut on_cpu: HashMap<(&str, Option<usize>), f64> = HashMap::new();
    let mut columns = vec!["case".to_owned(), ">ns/call (median)".to_owned()];
    if pinned_run {
        columns.extend(keys.iter().map(|&k| format!(">{} ns", cpu_name(k))));
    }
    columns.extend([">ns/call (min)", ">processes' medians", ">allocs/call"].map(str::to_owned));
    let mut t1 = Table::new(&columns.iter().map(String::as_str).collect::<Vec<_>>());
    for c in CASES {
        let runs = ones
            .get(c.id)
            .filter(|runs| runs.len() == procs)
            .ok_or_else(|| format!("`{}` was not measured in every process", c.id))?;
        let medians: Vec<f64> = runs.iter().map(|(_, r)| r.median_ns).collect();
        let t = Timing {
            median_ns: median(medians.clone()),
            min_ns: runs
                .iter()
                .map(|(_, r)| r.min_ns)
                .fold(f64::INFINITY, f64::min),
            allocs_per_call: runs
                .iter()
                .map(|(_, r)| r.allocs_per_call)
                .fold(0.0, f64::max),
            ..Timing::default()
        };
        let mut row = vec![c.label.to_owned(), fmt_num(t.median_ns)];
        for &k in &keys {
            let here: Vec<f64> = runs
                .iter()
                .filter(|(cpu, _)| *cpu == k)
                .map(|(_, r)| r.median_ns)
                .collect();
            let m = median(here);
            on_cpu.insert((c.id, k), m);
            if pinned_run {
                row.push(fmt_num(m));
            }
        }
        row.extend([
            fmt_num(t.min_ns),
            fmt_spread(&medians),
            fmt_num(t.allocs_per_call),
        ]);
        t1.row(row);
        one.insert(c.id, t);
    }

    // Two threads: in each process, each thread's median over the samples
    // it took while the other ran too (see `concurrent_samples`; too few
    // such samples and that thread gives no figure rather than one from
    // turns taken), over its own median alone in the same rounds: a ratio
    // of like with like. Pinned, each thread's ratio is its CPU's, and the
    // table gives the median of each CPU's; unpinned, each process gives
    // the ratio of the thread the other slowed the most.
    let mut two: HashMap<(&str, Option<usize>), TwoFigure> = HashMap::new();
    let mut t2 = Table::new(&[
        "case, two threads sharing its state",
        "CPU",
        ">one thread ns",
        ">two threads ns",
        ">ratio",
        ">threads' ratios",
        ">bare call's ratio, same rounds",
        ">ratio net of the bare call's",
        ">samples both on CPU",
        ">threads at once",
        ">allocs/call",
    ]);
    let per_thread = (settings.two_thread_samples / (3 * TWO_ROUNDS)).max(1) * TWO_ROUNDS;
    for c in CASES.iter().filter(|c| c.two_threads) {
        let runs = &twos[c.id];
        let counts: usize = runs.iter().map(|r| r.counts[0] + r.counts[1]).sum();
        let taken = runs.len() * per_thread * 2;
        let at_once = runs.iter().map(|r| r.parallelism).sum::<f64>() / runs.len() as f64;
        let allocs = runs.iter().map(|r| r.allocs_per_call).fold(0.0, f64::max);
        for (row_k, &k) in keys.iter().enumerate() {
            // (two threads, alone, the control's ratio) of each thread
            // counted for this CPU.
            let pairs: Vec<(f64, f64, f64)> = runs
                .iter()
                .flat_map(|r| {
                    let measured = (0..2).filter(|&i| !(r.m[i] / r.alone[i]).is_nan());
                    let threads: Vec<usize> = if k.is_none() {
                        let ratio = |i: &usize| r.m[*i] / r.alone[*i];
                        measured
                            .max_by(|a, b| ratio(a).total_cmp(&ratio(b)))
                            .into_iter()
                            .collect()
                    } else {
                        measured.filter(|&i| r.cpus[i] == k).collect()
                    };
                    threads
                        .into_iter()
                        .map(move |i| (r.m[i], r.alone[i], r.control[i]))
                })
                .collect();
            let ratios: Vec<f64> = pairs.iter().map(|(m, a, _)| m / a).collect();
            let controls: Vec<f64> = pairs.iter().map(|p| p.2).filter(|x| !x.is_nan()).collect();
            let nets: Vec<f64> = pairs
                .iter()
                .map(|(m, a, k)| m / a / k)
                .filter(|x| !x.is_nan())
                .collect();
            let figure = TwoFigure {
                two: median(pairs.iter().map(|p| p.0).collect()),
                alone: median(pairs.iter().map(|p| p.1).collect()),
                ratio: median(ratios.clone()),
                net: median(nets),
            };
            if !figure.ratio.is_nan() {
                two.insert((c.id, k), figure);
            }
            // What is of the whole case, not of a CPU, once.
            let case_wide = |cell: String| if row_k == 0 { cell } else { String::new() };
            t2.row(vec![
                c.label.to_owned(),
                cpu_name(k),
                fmt_num(figure.alone),
                fmt_num(figure.two),
                fmt_ratio(figure.ratio),
                fmt_spread_ratio(&ratios),
                fmt_ratio(median(controls)),
                fmt_ratio(figure.net),
                case_wide(format!("{counts} / {taken}")),
                case_wide(format!("{at_once:.2}")),
                case_wide(fmt_num(allocs)),
            ]);
        }
    }

    // A ratio of CPU times: each process's, then their median (over the
    // processes pinned to CPU `k` only, when given one).
    let per_process = |a: &str, b: &str, k: Option<Option<usize>>| {
        let ratios: Vec<f64> = ones[a]
            .iter()
            .zip(&ones[b])
            .filter(|((cpu, _), _)| k.is_none_or(|k| *cpu == k))
            .map(|((_, x), (_, y))| x.median_ns / y.median_ns)
            .collect();
        median(ratios)
    };
    let mut rt = ratio_table(
        &|id| one.get(id).map(|t| t.median_ns),
        &|a, b| per_process(a, b, None),
        "ns",
    );
    // Two threads: the median of the threads' ratios of their two-thread
    // figure over their own figure alone, on the CPU where it is worst,
    // for the library and for its floor sketch (the ns columns: the
    // medians of those figures); then the same net of the control's ratio
    // in the same rounds. A ratio to itself: the sketch's does not bound
    // the library's (what two threads add per call, the shared window's
    // cache line moving between cores, weighs more on a faster call).
    let (id, floor_id, target) = TWO_THREAD_TARGET;
    let ratio: fn(&TwoFigure) -> f64 = |f| f.ratio;
    let net: fn(&TwoFigure) -> f64 = |f| f.net;
    for (how, pick) in [("", ratio), (", net of the bare call's ratio", net)] {
        let worst = |id: &str| {
            keys.iter()
                .filter_map(|&k| two.get(&(id, k)).copied())
                .filter(|f| !pick(f).is_nan())
                .max_by(|a, b| pick(a).total_cmp(&pick(b)))
        };
        let (ours, floor) = (worst(id), worst(floor_id));
        let what = if pinned_run {
            format!("`breaker`, two threads sharing it vs each alone on its CPU (worse CPU){how}")
        } else {
            format!("`breaker`, two threads sharing it vs each alone (worse thread){how}")
        };
        let mut row = ratio_row(
            &what,
            (
                ours.map(|x| x.two),
                ours.map(|x| x.alone),
                ours.map_or(f64::NAN, |x| pick(&x)),
            ),
            (floor.map(|x| x.two), floor.map_or(f64::NAN, |x| pick(&x))),
            Some(target),
            false,
        );
        if ours.is_none() {
            row[4] = row[4].replace(
                "not measured",
                "not measured: the threads never ran at once",
            );
        }
        rt.row(row);
    }

    // Pinned, the same ratios on each CPU: a ratio that holds on one CPU
    // and not the other is not yet a result.
    let per_cpu = if pinned_run {
        let mut columns = vec!["comparison".to_owned()];
        for &k in &keys {
            columns.push(format!(">{} ratio", cpu_name(k)));
            columns.push(format!(">{} floor sketch ratio", cpu_name(k)));
        }
        let mut t = Table::new(&columns.iter().map(String::as_str).collect::<Vec<_>>());
        for r in RATIOS {
            let mut row = vec![r.what.to_owned()];
            for &k in &keys {
                row.push(fmt_ratio(per_process(r.ours, r.peer, Some(k))));
                row.push(fmt_ratio(per_process(r.floor, r.peer, Some(k))));
            }
            t.row(row);
        }
        format!(
            "\nThe same ratios from each CPU's processes alone (one thread):\n\n{}",
            t.markdown()
        )
    } else {
        String::new()
    };

    let placement = if pinned_run {
        format!(
            "Each process is pinned to one CPU, the CPUs in turn ({}); the \
             median is over all processes, and each CPU's column over that \
             CPU's processes (the mean of the middle two of an even count). ",
            keys.iter()
                .map(|&k| cpu_name(k))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        "The processes are not pinned to CPUs (`PEERS_PIN=0`, or a single \
         CPU). "
            .to_owned()
    };
    let two_note = format!(
        "Two threads, one case per process{}, in {TWO_ROUNDS} rounds of three \
         phases (each thread alone, both at once; alone first in every other \
         round): each thread's two-thread figure is the median of the samples \
         it took while the other thread was on a CPU too, its figure alone the \
         median of its samples alone, and its ratio the one over the other. {}",
        if pinned_run {
            ", each thread pinned to a CPU of its own"
        } else {
            ""
        },
        if pinned_run {
            "A row gives, per CPU, the medians of its threads' figures and \
             ratios over the processes (\"threads' ratios\" their range). The \
             same rounds run a control, the bare call, which shares nothing: \
             its ratio is what two busy CPUs cost on this machine whatever \
             the code (two virtual CPUs may share a core, or the host's other \
             work), and a case's ratio above it is what sharing its state \
             costs."
        } else {
            "The table gives the medians over processes of the figures and \
             ratio of the thread the other slowed the most, next to the same \
             rounds' control, the bare call, which shares nothing."
        }
    );
    let out = format!(
        "{}\nTime per call: the median over {procs} processes of each process's \
         median over {} samples of the calling thread's CPU time \
         (`CLOCK_THREAD_CPUTIME_ID`), each sample long enough that the clock's \
         cost does not matter, after a warm-up (\"processes' medians\" gives \
         their range; the minimum is over every sample). {placement}In a \
         process the one-thread cases take turns, one sample each, so that \
         every case meets the same states of a shared machine. Release build, \
         current-thread tokio runtime, futures polled by hand. {}This \
         machine's cores are shared with other builds, so CPU-time figures \
         move between runs (the two-thread ones most); the instruction counts \
         of `benches/callgrind.sh` do not. {two_note} \"Samples both on \
         CPU\" counts those samples over all processes, out of {} of about \
         {:?} per thread and process (a thread with fewer than {} gives no \
         figure); \"threads at once\" is both threads' CPU time over the wall-clock time they \
         sampled in (2 on a quiet 2-core machine; lower here, where other \
         processes take turns on the cores). A ratio is the median over the \
         processes of each one's resilient figure over its peer's figure (so \
         it need not equal the ratio of the medians shown beside it). {FLOOR_NOTE} In the two-thread row, the floor sketch \
         ratio is the sketch's own ratio of two threads to one: a ratio to \
         itself, which does not bound the library's, since \
         what a second thread adds per call (the shared window's cache line \
         moving between cores) weighs more on a faster call; compare the \
         nanoseconds two threads add to each.\n\n{}\n{}\n{}{}",
        header("### Success path, time per call"),
        settings.samples,
        if quick {
            "Quick mode (`PEERS_QUICK=1`): few samples, for a smoke run only. "
        } else {
            ""
        },
        per_thread,
        settings.two_thread_sample,
        MIN_CONCURRENT,
        t1.markdown(),
        t2.markdown(),
        rt.markdown(),
        per_cpu
    );
    write_out(&out)
}
