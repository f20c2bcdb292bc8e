//! The retry-storm experiment (Google SRE book, chapters 21 "Handling
//! Overload" and 22 "Addressing Cascading Failures"), through four layers
//! of `#[resilient]` services.
//!
//! A fleet of callers sends user requests at a steady rate through four
//! layered services (frontend → api → domain → storage client), each with
//! `retries = 3` and its own `timeout_ms` (5 s, 3 s, 2 s, 1 s from the
//! outside in; the frontend also has `deadline_ms = 10000`), over one
//! dependency. During the fault window the dependency
//!
//! * [`Shape::Refuse`]: refuses every call fast (5 ms);
//! * [`Shape::Hang`]: never answers a call that arrives in the window, so
//!   only the layers' timeouts end it;
//! * [`Shape::Overload`]: is sent a surge of five times the normal rate. It
//!   serves twice the normal rate (at 200 requests/s, 40 workers taking
//!   100 ms per call: 400 calls/s) in arrival order, and
//!   rejects a call at once when 2 s of work is already waiting. Because the
//!   queue is longer than the innermost 1 s timeout, every call it accepts
//!   under overload times out at its caller although the server still does
//!   the work: the wasted work that keeps an overloaded service collapsed
//!   after the surge ends if retries keep its queue full (chapter 22's
//!   cascading-failure loop).
//!
//! Four configurations of the same layers ([`Config`]): hand-written nested
//! retry loops with per-layer timeouts (`naive`), the library's defaults,
//! the library with the dependency's retry budget on the layer nearest it,
//! and the library with that layer's circuit breaker and budget.
//!
//! All in tokio's paused clock, on the current thread, with the jitter
//! seeded: every run gives the same figures. The twelve runs of the
//! example take about 12 s of CPU in a release build, most of it in the
//! naive loops under overload (some 80,000 calls per simulated second).

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::{
    Backoff, BreakerConfig, BudgetConfig, Classification, Classify, Registry, SlidingWindow, State,
    resilient,
};
use tokio::time::Instant;

/// User requests per second outside the overload surge. High enough that
/// the retry budget's floor (10 retries per second) adds only 0.05 attempts
/// per request to its 10 % ratio. [`run_at`] takes another rate.
pub const RATE: u32 = 200;
/// The overload surge multiplies the request rate by this.
pub const SURGE: u32 = 5;
/// The overloaded dependency serves this many times the normal rate.
pub const CAPACITY: u32 = 2;
/// How long requests are sent.
pub const RUN: Duration = Duration::from_secs(70);
/// The fault window.
pub const FAULT: Range<Duration> = Duration::from_secs(10)..Duration::from_secs(40);
/// The top layer's deadline: no user request lasts longer.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// Requests of the first seconds of the fault are left out of the "after
/// warm-up" mean: the retry budget's window (10 s) still remembers the
/// requests from before the fault.
pub const WARM_UP: Duration = Duration::from_secs(10);
/// One-way trip to the dependency and back, when it answers.
const LATENCY: Duration = Duration::from_millis(5);
/// Time one call takes one of the overloaded dependency's workers.
const SERVICE: Duration = Duration::from_millis(100);
/// The most waiting work the overloaded dependency accepts, in time: 2 s,
/// longer than the innermost layer's 1 s timeout.
const QUEUE: Duration = Duration::from_secs(2);

/// What the dependency does during the fault window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Refuses every call fast.
    Refuse,
    /// Never answers.
    Hang,
    /// Overloaded by a surge of requests; rejects what exceeds its queue.
    Overload,
}

impl Shape {
    /// Every shape, in the order of the tables and charts.
    pub const ALL: [Shape; 3] = [Shape::Refuse, Shape::Hang, Shape::Overload];

    /// The name used in tables and charts.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Refuse => "refuses fast",
            Shape::Hang => "hangs",
            Shape::Overload => "overloaded",
        }
    }
}

/// How the four layers retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// Hand-written nested loops: every layer retries 3 times with full
    /// jitter and cancels its attempts at its own timeout.
    Naive,
    /// `#[resilient(retries = 3, idempotent, timeout_ms = …)]` on every layer.
    Defaults,
    /// The same, and `budget = "storage"` on the layer nearest the
    /// dependency: the default retry budget (10 % of the requests of the
    /// last 10 s, plus 10 retries per second).
    Budget,
    /// The same with `breaker = "storage"`, which also names the budget:
    /// the breaker opens at 50 % failures over the last 10 s (at least 20
    /// calls) and stays open 5 s.
    BreakerBudget,
}

impl Config {
    /// Every configuration, in the order of the tables and charts.
    pub const ALL: [Config; 4] = [
        Config::Naive,
        Config::Defaults,
        Config::Budget,
        Config::BreakerBudget,
    ];

    /// The name used in tables and legends.
    pub fn name(self) -> &'static str {
        match self {
            Config::Naive => "naive nested loops",
            Config::Defaults => "library defaults",
            Config::Budget => "+ retry budget",
            Config::BreakerBudget => "+ breaker and budget",
        }
    }
}

/// The dependency's and the library's failures.
#[derive(Debug)]
pub enum Failure {
    /// Refused fast.
    Unavailable,
    /// Rejected: too much work waiting.
    Overloaded,
    /// A naive layer's timeout.
    TimedOut,
    /// A refusal by the library.
    Resilience(resilient::Error),
}

impl From<resilient::Error> for Failure {
    fn from(e: resilient::Error) -> Self {
        Failure::Resilience(e)
    }
}

impl Classify for Failure {
    fn classify(&self) -> Classification {
        match self {
            Failure::Unavailable | Failure::Overloaded | Failure::TimedOut => {
                Classification::Transient
            }
            Failure::Resilience(e) => e.classify(),
        }
    }
}

tokio::task_local! {
    /// Attempts of the current user request that reached the dependency.
    static ATTEMPTS: Cell<u32>;
}

/// The overloaded dependency's books: when each worker is next free, and
/// when each accepted call that has not started yet will start.
#[derive(Debug)]
struct Server {
    free_at: Vec<Instant>,
    waiting: BinaryHeap<Reverse<Instant>>,
    queue_limit: usize,
}

/// The dependency: behaves per its [`Shape`] during the fault window and
/// records every call that reaches it.
#[derive(Debug)]
pub struct Dep {
    shape: Shape,
    fault: Range<Duration>,
    start: Instant,
    server: Mutex<Server>,
    per_second: Mutex<Vec<u32>>,
}

impl Dep {
    fn new(shape: Shape, rate: u32) -> Self {
        let start = Instant::now();
        let capacity = f64::from(CAPACITY * rate);
        let workers = (capacity * SERVICE.as_secs_f64()).ceil() as usize;
        Dep {
            shape,
            fault: FAULT,
            start,
            server: Mutex::new(Server {
                free_at: vec![start; workers.max(1)],
                waiting: BinaryHeap::new(),
                queue_limit: (capacity * QUEUE.as_secs_f64()) as usize,
            }),
            per_second: Mutex::new(Vec::new()),
        }
    }

    /// A dependency that refuses every call fast, from now on.
    pub fn refusing() -> Self {
        Dep {
            fault: Duration::ZERO..Duration::MAX,
            ..Dep::new(Shape::Refuse, RATE)
        }
    }

    /// Calls that reached it so far.
    pub fn calls(&self) -> u32 {
        self.per_second.lock().unwrap().iter().sum()
    }

    fn in_fault(&self, at: Duration) -> bool {
        self.fault.contains(&at)
    }

    /// One call to the dependency.
    pub async fn call(&self) -> Result<(), Failure> {
        let now = Instant::now();
        let at = now - self.start;
        let _ = ATTEMPTS.try_with(|n| n.set(n.get() + 1));
        {
            let mut per_second = self.per_second.lock().unwrap();
            let second = at.as_secs() as usize;
            if per_second.len() <= second {
                per_second.resize(second + 1, 0);
            }
            per_second[second] += 1;
        }
        match self.shape {
            Shape::Refuse => {
                tokio::time::sleep(LATENCY).await;
                if self.in_fault(at) {
                    Err(Failure::Unavailable)
                } else {
                    Ok(())
                }
            }
            Shape::Hang => {
                if self.in_fault(at) {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(LATENCY).await;
                Ok(())
            }
            Shape::Overload => {
                let done = {
                    let mut server = self.server.lock().unwrap();
                    while server.waiting.peek().is_some_and(|s| s.0 <= now) {
                        server.waiting.pop();
                    }
                    if server.waiting.len() >= server.queue_limit {
                        None
                    } else {
                        // First come, first served by the first free worker.
                        let worker = (0..server.free_at.len())
                            .min_by_key(|&w| server.free_at[w])
                            .unwrap_or(0);
                        let begin = server.free_at[worker].max(now);
                        server.free_at[worker] = begin + SERVICE;
                        if begin > now {
                            server.waiting.push(Reverse(begin));
                        }
                        Some(begin + SERVICE)
                    }
                };
                match done {
                    None => {
                        tokio::time::sleep(LATENCY).await;
                        Err(Failure::Overloaded)
                    }
                    // The work is booked whether or not the caller is still
                    // there when it is done: a server does not know.
                    Some(done) => {
                        tokio::time::sleep_until(done + LATENCY).await;
                        Ok(())
                    }
                }
            }
        }
    }
}

// --- naive: hand-written nested retry loops -------------------------------

type Call<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

/// One naive layer: up to 4 attempts of `attempt`, each cut at `timeout`,
/// with the library's default backoff between them.
async fn naive_layer<'a>(timeout: Duration, attempt: impl Fn() -> Call<'a>) -> Result<(), Failure> {
    let mut delays = Backoff::default().delays();
    let mut last = Err(Failure::TimedOut);
    for n in 0..4 {
        if n > 0 {
            tokio::time::sleep(delays.next().unwrap_or_default()).await;
        }
        last = match tokio::time::timeout(timeout, attempt()).await {
            Ok(result) => result,
            Err(_) => Err(Failure::TimedOut),
        };
        if last.is_ok() {
            break;
        }
    }
    last
}

fn naive1(dep: &Dep) -> Call<'_> {
    Box::pin(naive_layer(Duration::from_secs(1), move || {
        Box::pin(dep.call())
    }))
}
fn naive2(dep: &Dep) -> Call<'_> {
    Box::pin(naive_layer(Duration::from_secs(2), move || naive1(dep)))
}
fn naive3(dep: &Dep) -> Call<'_> {
    Box::pin(naive_layer(Duration::from_secs(3), move || naive2(dep)))
}
async fn naive4(dep: &Dep) -> Result<(), Failure> {
    let layers = naive_layer(Duration::from_secs(5), move || naive3(dep));
    match tokio::time::timeout(DEADLINE, layers).await {
        Ok(result) => result,
        Err(_) => Err(Failure::TimedOut),
    }
}

/// `layers` hand-written nested loops of 3 retries each, without timeouts
/// or deadline: the arithmetic of the SRE book's chapter 22.
fn naive_stack(dep: &Dep, layers: u32) -> Call<'_> {
    if layers == 0 {
        return Box::pin(dep.call());
    }
    Box::pin(naive_layer(Duration::MAX, move || {
        naive_stack(dep, layers - 1)
    }))
}

/// Attempts one user request makes over a dependency that refuses fast,
/// through `layers` (1 to 4) nested layers of 3 retries: hand-written loops
/// if `naive`, else the library's (the layers of [`Config::Defaults`]).
pub async fn attempts_of_one_request(layers: u32, naive: bool) -> u32 {
    assert!((1..=4).contains(&layers), "1 to 4 layers");
    let dep = Dep::refusing();
    let _ = if naive {
        naive_stack(&dep, layers).await
    } else {
        match layers {
            1 => defaults1(&dep).await,
            2 => defaults2(&dep).await,
            3 => defaults3(&dep).await,
            _ => defaults4(&dep).await,
        }
    };
    dep.calls()
}

// --- the library's defaults -----------------------------------------------

#[resilient(retries = 3, idempotent, timeout_ms = 1000)]
async fn defaults1(dep: &Dep) -> Result<(), Failure> {
    dep.call().await
}
#[resilient(retries = 3, idempotent, timeout_ms = 2000)]
async fn defaults2(dep: &Dep) -> Result<(), Failure> {
    defaults1(dep).await
}
#[resilient(retries = 3, idempotent, timeout_ms = 3000)]
async fn defaults3(dep: &Dep) -> Result<(), Failure> {
    defaults2(dep).await
}
#[resilient(retries = 3, idempotent, timeout_ms = 5000, deadline_ms = 10_000)]
async fn defaults4(dep: &Dep) -> Result<(), Failure> {
    defaults3(dep).await
}

// --- with the dependency's retry budget -----------------------------------

#[resilient(retries = 3, idempotent, timeout_ms = 1000, budget = "storage")]
async fn budget1(dep: &Dep) -> Result<(), Failure> {
    dep.call().await
}
#[resilient(retries = 3, idempotent, timeout_ms = 2000)]
async fn budget2(dep: &Dep) -> Result<(), Failure> {
    budget1(dep).await
}
#[resilient(retries = 3, idempotent, timeout_ms = 3000)]
async fn budget3(dep: &Dep) -> Result<(), Failure> {
    budget2(dep).await
}
#[resilient(retries = 3, idempotent, timeout_ms = 5000, deadline_ms = 10_000)]
async fn budget4(dep: &Dep) -> Result<(), Failure> {
    budget3(dep).await
}

// --- with the dependency's breaker and retry budget -----------------------

#[resilient(retries = 3, idempotent, timeout_ms = 1000, breaker = "storage")]
async fn breaker1(dep: &Dep) -> Result<(), Failure> {
    dep.call().await
}
#[resilient(retries = 3, idempotent, timeout_ms = 2000)]
async fn breaker2(dep: &Dep) -> Result<(), Failure> {
    breaker1(dep).await
}
#[resilient(retries = 3, idempotent, timeout_ms = 3000)]
async fn breaker3(dep: &Dep) -> Result<(), Failure> {
    breaker2(dep).await
}
#[resilient(retries = 3, idempotent, timeout_ms = 5000, deadline_ms = 10_000)]
async fn breaker4(dep: &Dep) -> Result<(), Failure> {
    breaker3(dep).await
}

/// The registry every configuration runs in (a fresh one per run, so no
/// budget or breaker state carries over).
pub fn registry(config: Config) -> Registry {
    let mut builder = Registry::builder().budget("storage", BudgetConfig::default());
    builder = match config {
        Config::BreakerBudget => builder.breaker(
            "storage",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::TimeBased { seconds: 10 })
                .minimum_number_of_calls(20)
                .wait_duration_in_open_state(Duration::from_secs(5)),
        ),
        // Named but disabled: only the budget acts.
        _ => builder.breaker(
            "storage",
            BreakerConfig::default().initial_state(State::Disabled),
        ),
    };
    builder.build().expect("a valid configuration")
}

async fn request(config: Config, dep: &Dep) -> Result<(), Failure> {
    match config {
        Config::Naive => naive4(dep).await,
        Config::Defaults => defaults4(dep).await,
        Config::Budget => budget4(dep).await,
        Config::BreakerBudget => breaker4(dep).await,
    }
}

/// One user request as the fleet saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// When it was sent, from the start of the run.
    pub sent: Duration,
    /// Attempts of it that reached the dependency.
    pub attempts: u32,
    /// Whether it succeeded.
    pub ok: bool,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// The dependency's fault.
    pub shape: Shape,
    /// How the layers retried.
    pub config: Config,
    /// User requests per second outside an overload's surge.
    pub rate: u32,
    /// Every user request, in the order sent.
    pub requests: Vec<Request>,
    /// Calls reaching the dependency in each second of the run.
    pub attempts_per_second: Vec<u32>,
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

impl Report {
    fn sent_in(&self, window: Range<Duration>) -> impl Iterator<Item = &Request> {
        self.requests
            .iter()
            .filter(move |r| window.contains(&r.sent))
    }

    /// The user requests whose whole life (at most [`DEADLINE`]) lies in
    /// the fault window: those sent from its start to [`DEADLINE`] before
    /// its end. Later ones may retry past the fault and succeed.
    pub fn during() -> Range<Duration> {
        FAULT.start..FAULT.end - DEADLINE
    }

    /// Mean attempts per user request of [`Report::during`].
    pub fn mean_attempts_during(&self) -> f64 {
        mean(self.sent_in(Self::during()).map(|r| f64::from(r.attempts)))
    }

    /// Mean attempts per user request of [`Report::during`], less the
    /// first [`WARM_UP`] of the fault.
    pub fn mean_attempts_after_warm_up(&self) -> f64 {
        let during = Self::during();
        mean(
            self.sent_in(during.start + WARM_UP..during.end)
                .map(|r| f64::from(r.attempts)),
        )
    }

    /// The most attempts any user request sent during the fault made.
    pub fn worst_attempts_during(&self) -> u32 {
        self.sent_in(FAULT).map(|r| r.attempts).max().unwrap_or(0)
    }

    /// The most attempts any user request of the whole run made.
    pub fn worst_attempts(&self) -> u32 {
        self.requests.iter().map(|r| r.attempts).max().unwrap_or(0)
    }

    /// Share of the user requests of [`Report::during`] that succeeded.
    pub fn success_during(&self) -> f64 {
        mean(
            self.sent_in(Self::during())
                .map(|r| f64::from(u8::from(r.ok))),
        )
    }

    /// Share of the user requests sent after the fault that succeeded.
    pub fn success_after(&self) -> f64 {
        mean(
            self.sent_in(FAULT.end..RUN)
                .map(|r| f64::from(u8::from(r.ok))),
        )
    }

    /// Seconds from the end of the fault until the first whole second in
    /// which every user request sent succeeded; `None` if none did.
    pub fn recovery(&self) -> Option<Duration> {
        let mut second = FAULT.end;
        while second < RUN {
            let window = second..second + Duration::from_secs(1);
            if self.sent_in(window).all(|r| r.ok) {
                return Some(second - FAULT.end);
            }
            second += Duration::from_secs(1);
        }
        None
    }
}

/// Runs one configuration against one shape at [`RATE`]: see [`run_at`].
pub async fn run(shape: Shape, config: Config) -> Report {
    run_at(shape, config, RATE).await
}

/// Runs one configuration against one shape: [`RUN`] of user requests at
/// `rate` per second (at [`SURGE`] times that during an overload's fault
/// window), then waits for every request to end. The overloaded
/// dependency's capacity scales with `rate`, so a lower rate gives the same
/// dynamics for less computation (the budget's floor of 10 retries per
/// second then weighs more per request).
///
/// Call it on a current-thread runtime with paused time (what
/// `#[tokio::test(start_paused = true)]` gives) for figures that are the
/// same every run.
pub async fn run_at(shape: Shape, config: Config, rate: u32) -> Report {
    assert!(rate > 0, "a positive request rate");
    resilient::seed_jitter(2015);
    let registry = registry(config);
    registry
        .scope(async move {
            let dep = Arc::new(Dep::new(shape, rate));
            let records = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            let mut next = dep.start;
            loop {
                let sent = next - dep.start;
                if sent >= RUN {
                    break;
                }
                tokio::time::sleep_until(next).await;
                let (dep2, records2) = (dep.clone(), records.clone());
                tasks.push(tokio::spawn(resilient::propagate(ATTEMPTS.scope(
                    Cell::new(0),
                    async move {
                        let ok = request(config, &dep2).await.is_ok();
                        let attempts = ATTEMPTS.with(Cell::get);
                        records2
                            .lock()
                            .unwrap()
                            .push(Request { sent, attempts, ok });
                    },
                ))));
                let now_rate = if shape == Shape::Overload && FAULT.contains(&sent) {
                    SURGE * rate
                } else {
                    rate
                };
                next += Duration::from_secs(1) / now_rate;
            }
            for task in tasks {
                task.await.expect("a request task panicked");
            }
            let mut requests = std::mem::take(&mut *records.lock().unwrap());
            requests.sort_by_key(|r| r.sent);
            let attempts_per_second = dep.per_second.lock().unwrap().clone();
            Report {
                shape,
                config,
                rate,
                requests,
                attempts_per_second,
            }
        })
        .await
}
