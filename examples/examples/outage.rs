//! A simulated outage against three layered services, each retrying up to
//! three times: how many attempts reach the failing dependency per user
//! request, and how long retry traffic goes on after it recovers.
//!
//! Three configurations:
//! - **naive**: every layer retries on its own (a hand-written loop with the
//!   same backoff), as three layers of most retry libraries would;
//! - **one layer**: the same three layers with `#[resilient(retries = 3)]`,
//!   where only the layer closest to the dependency retries a failure;
//! - **one layer + budget**: the same, with the innermost layer naming its
//!   dependency (`breaker = "storage"`, the breaker itself disabled here to
//!   show the budget alone), so the dependency's retry budget (10 % of
//!   recent requests) caps retries across all requests.
//!
//! Time is tokio's paused clock, so the 60 simulated seconds run in a
//! moment and every run prints the same figures.
//!
//! Run with `cargo run -p resilient-examples --example outage`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use resilient::{
    Backoff, BreakerConfig, BudgetConfig, Classification, Classify, Registry, State, resilient,
};
use tokio::time::Instant;

const REQUESTS_PER_SECOND: u32 = 50;
const RUN: Duration = Duration::from_secs(60);
const OUTAGE_START: Duration = Duration::from_secs(10);
const OUTAGE_END: Duration = Duration::from_secs(40);

#[derive(Debug)]
enum Failure {
    Unavailable,
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
            Failure::Unavailable => Classification::Transient,
            Failure::Resilience(e) => e.classify(),
        }
    }
}

/// The failing dependency: down between `OUTAGE_START` and `OUTAGE_END`;
/// records every attempt it receives.
struct Storage {
    start: Instant,
    attempts: Mutex<Vec<(Duration, bool)>>,
}

impl Storage {
    async fn read(&self, is_retry: bool) -> Result<(), Failure> {
        let at = self.start.elapsed();
        self.attempts.lock().unwrap().push((at, is_retry));
        tokio::time::sleep(Duration::from_millis(5)).await;
        if (OUTAGE_START..OUTAGE_END).contains(&at) {
            Err(Failure::Unavailable)
        } else {
            Ok(())
        }
    }
}

type Call<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

// Naive: each layer retries everything below it, 3 times, with full jitter.
async fn naive_retry<'a>(mut attempt: impl FnMut(bool) -> Call<'a>) -> Result<(), Failure> {
    let mut delays = Backoff::default().delays();
    let mut result = attempt(false).await;
    for _ in 0..3 {
        if result.is_ok() {
            break;
        }
        tokio::time::sleep(delays.next().unwrap_or_default()).await;
        result = attempt(true).await;
    }
    result
}

fn naive_frontend(s: &Storage) -> Call<'_> {
    Box::pin(naive_retry(move |_| naive_api(s)))
}
fn naive_api(s: &Storage) -> Call<'_> {
    Box::pin(naive_retry(move |_| naive_store(s)))
}
fn naive_store(s: &Storage) -> Call<'_> {
    Box::pin(naive_retry(move |retry| Box::pin(s.read(retry))))
}

// One retrying layer: the library's rule.
#[resilient(retries = 3, idempotent)]
async fn frontend(s: &Storage) -> Result<(), Failure> {
    api(s).await
}
#[resilient(retries = 3, idempotent)]
async fn api(s: &Storage) -> Result<(), Failure> {
    store(s).await
}
#[resilient(retries = 3, idempotent)]
async fn store(s: &Storage) -> Result<(), Failure> {
    s.read(resilient_retry_marker()).await
}

// One retrying layer + the dependency's retry budget.
#[resilient(retries = 3, idempotent)]
async fn frontend_b(s: &Storage) -> Result<(), Failure> {
    api_b(s).await
}
#[resilient(retries = 3, idempotent)]
async fn api_b(s: &Storage) -> Result<(), Failure> {
    store_b(s).await
}
#[resilient(retries = 3, idempotent, breaker = "storage")]
async fn store_b(s: &Storage) -> Result<(), Failure> {
    s.read(resilient_retry_marker()).await
}

tokio::task_local! {
    static ATTEMPT_OF_REQUEST: std::cell::Cell<u32>;
}

/// Whether this attempt at storage is a retry within the current user request.
fn resilient_retry_marker() -> bool {
    ATTEMPT_OF_REQUEST
        .try_with(|n| {
            let seen = n.get();
            n.set(seen + 1);
            seen > 0
        })
        .unwrap_or(false)
}

struct Report {
    name: &'static str,
    requests: u32,
    outage_attempts: usize,
    outage_requests: u32,
    retry_tail: Duration,
    retries_after_recovery: usize,
}

async fn simulate(name: &'static str, request: for<'a> fn(&'a Storage) -> Call<'a>) -> Report {
    let storage = Arc::new(Storage {
        start: Instant::now(),
        attempts: Mutex::new(Vec::new()),
    });
    let interval = Duration::from_secs(1) / REQUESTS_PER_SECOND;
    let mut tasks = Vec::new();
    let mut requests = 0;
    let mut outage_requests = 0;
    while storage.start.elapsed() < RUN {
        let at = storage.start.elapsed();
        if (OUTAGE_START..OUTAGE_END).contains(&at) {
            outage_requests += 1;
        }
        requests += 1;
        let s = storage.clone();
        // `propagate` hands the spawned request this task's registry.
        tasks.push(tokio::spawn(resilient::propagate(
            ATTEMPT_OF_REQUEST.scope(std::cell::Cell::new(0), async move {
                let _ = request(&s).await;
            }),
        )));
        tokio::time::sleep(interval).await;
    }
    for t in tasks {
        let _ = t.await;
    }
    let attempts = storage.attempts.lock().unwrap();
    let during = |at: &Duration| (OUTAGE_START..OUTAGE_END).contains(at);
    let outage_attempts = attempts.iter().filter(|(at, _)| during(at)).count();
    let retries_after_recovery = attempts
        .iter()
        .filter(|(at, retry)| *retry && *at >= OUTAGE_END)
        .count();
    let last_retry = attempts
        .iter()
        .filter(|(at, retry)| *retry && *at >= OUTAGE_END)
        .map(|(at, _)| *at)
        .max();
    Report {
        name,
        requests,
        outage_attempts,
        outage_requests,
        retry_tail: last_retry.map_or(Duration::ZERO, |at| at - OUTAGE_END),
        retries_after_recovery,
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    resilient::seed_jitter(2015);
    let registry = Registry::builder()
        .breaker(
            "storage",
            BreakerConfig::default().initial_state(State::Disabled),
        )
        .budget(
            "storage",
            BudgetConfig::ratio(0.1).window(Duration::from_secs(10)),
        )
        .build()
        .expect("valid configuration");

    println!(
        "{} user requests/s for {} s; the storage dependency is down from {} s to {} s.",
        REQUESTS_PER_SECOND,
        RUN.as_secs(),
        OUTAGE_START.as_secs(),
        OUTAGE_END.as_secs()
    );
    println!("Three layers (frontend -> api -> storage client), each `retries = 3`.\n");
    println!(
        "{:<20} {:>22} {:>30}",
        "configuration", "attempts per request", "retries after recovery"
    );
    println!(
        "{:<20} {:>22} {:>30}",
        "", "(during the outage)", "(how many, for how long)"
    );
    let reports = registry
        .scope(async {
            vec![
                simulate("naive", naive_frontend).await,
                simulate("one layer", |s| Box::pin(frontend(s))).await,
                simulate("one layer + budget", |s| Box::pin(frontend_b(s))).await,
            ]
        })
        .await;
    for r in &reports {
        let per_request = r.outage_attempts as f64 / f64::from(r.outage_requests);
        println!(
            "{:<20} {:>22} {:>30}",
            r.name,
            format!("{per_request:.2}"),
            format!(
                "{} over {:.2} s",
                r.retries_after_recovery,
                r.retry_tail.as_secs_f64()
            ),
        );
        let _ = r.requests;
    }
    println!(
        "\nWith the budget, retries are capped at 10 % of recent requests plus a floor of \
         10 retries per second (so a quiet client can still retry): at {REQUESTS_PER_SECOND} \
         requests/s the floor adds {:.2} attempts per request.",
        10.0 / f64::from(REQUESTS_PER_SECOND)
    );
}
