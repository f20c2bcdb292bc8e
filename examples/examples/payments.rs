//! Charges through a faulty payment provider, end to end, in one process.
//!
//! A real axum payment provider listens on 127.0.0.1 and misbehaves the
//! way providers do: some answers are 503 or 429 with `Retry-After` (in
//! seconds, and as an HTTP-date), some are slow past the client's timeout
//! after charging, some connections drop before or after charging, and for
//! a few seconds it is down altogether. It deduplicates by
//! `Idempotency-Key`, as real providers do.
//!
//! The client is the [`client`] module below: two annotated functions over
//! reqwest, returning `resilient::http::Error`, and a registry read from
//! `examples/payments.toml`. No error type, no `Classify` impl, no header
//! code: that is what `resilient`'s `http` and `reqwest` features bring.
//!
//! At the end it prints what a person wants to know: how many charges were
//! made, how many failed, and of those that failed after the request went
//! out, which were in fact made (looked up by their idempotency key).
//!
//! Run with `cargo run -p resilient-examples --example payments`
//! (optionally `-- CHARGES`, default 400: one every 25 ms, about 12 s).
//!
//! Ctrl-C (or SIGTERM) shuts the client down gracefully: no new charge
//! starts, new annotated calls are refused with `ShuttingDown`, the charges
//! in flight (their retries and reconciliations included) get up to 10 s to
//! finish, and the summary says how many were still running.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use resilient::{AttemptOutcome, BreakerEvent, IdempotencyKey, Registry};

/// What a newcomer writes to call the provider resiliently: everything
/// here is the client's glue (counted in the closing note of issue 8).
mod client {
    use resilient::IdempotencyKey;
    use resilient::reqwest::{RequestBuilderExt, ResponseExt};
    use resilient::resilient;

    #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
    pub(crate) struct Receipt {
        pub(crate) id: u64,
        pub(crate) cents: u64,
    }

    #[resilient(
        retries = 3,
        breaker = "payments",
        deadline_ms = 12000,
        timeout_ms = 1000
    )]
    pub(crate) async fn charge(
        http: &reqwest::Client,
        base: &str,
        key: &IdempotencyKey,
        cents: u64,
    ) -> Result<Receipt, resilient::http::Error> {
        let response = http
            .post(format!("{base}/charges"))
            .idempotency_key(key)
            .json(&cents)
            .send_checked()
            .await?;
        Ok(response.json().await?)
    }

    /// Reconciliation: was the charge with this key made?
    #[resilient(retries = 3, deadline_ms = 5000, timeout_ms = 1000, idempotent)]
    pub(crate) async fn find_charge(
        http: &reqwest::Client,
        base: &str,
        key: &IdempotencyKey,
    ) -> Result<Option<Receipt>, resilient::http::Error> {
        let response = http.get(format!("{base}/charges/{key}")).send().await?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(Some(response.check_status().await?.json().await?))
    }

    pub(crate) fn load_registry() -> Result<(), Box<dyn std::error::Error>> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/payments.toml");
        resilient::Registry::builder()
            .toml_file(path)?
            .build()?
            .install()?;
        Ok(())
    }
}

/// The payment provider: an axum service with injected faults.
mod provider {
    use std::collections::HashMap;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};
    use std::time::{Duration, Instant, SystemTime};

    use axum::Json;
    use axum::body::{Body, Bytes};
    use axum::extract::{Path, State};
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::{IntoResponse, Response};

    use super::client::Receipt;

    /// Shares of requests that meet each fault, in percent.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Faults {
        pub(crate) unavailable_retry_after_secs: u32,
        pub(crate) too_many_retry_after_date: u32,
        pub(crate) slow_after_charging: u32,
        pub(crate) drop_before_charging: u32,
        pub(crate) drop_after_charging: u32,
        /// Every request fails with 503 (no `Retry-After`) in this window
        /// of the run.
        pub(crate) outage: (Duration, Duration),
        /// How long a slow answer takes (past the client's `timeout_ms`).
        pub(crate) slow: Duration,
    }

    pub(crate) const FAULTS: Faults = Faults {
        unavailable_retry_after_secs: 4,
        too_many_retry_after_date: 4,
        slow_after_charging: 3,
        drop_before_charging: 3,
        drop_after_charging: 3,
        outage: (Duration::from_secs(4), Duration::from_secs(7)),
        slow: Duration::from_millis(1500),
    };

    pub(crate) struct Provider {
        started: Instant,
        faults: Faults,
        next_id: AtomicU32,
        pub(crate) requests: AtomicU32,
        /// Receipts by idempotency key, and how many times each key's
        /// charge was carried out (more than once is a double charge).
        pub(crate) charges: Mutex<HashMap<String, (Receipt, u32)>>,
    }

    impl Provider {
        pub(crate) fn new(faults: Faults) -> Arc<Self> {
            Arc::new(Provider {
                started: Instant::now(),
                faults,
                next_id: AtomicU32::new(1),
                requests: AtomicU32::new(0),
                charges: Mutex::new(HashMap::new()),
            })
        }

        /// Charges once per key: a repeat gets the first receipt.
        fn charge_once(&self, key: &str, cents: u64) -> Receipt {
            let mut charges = self.charges.lock().unwrap();
            let entry = charges.entry(key.to_owned()).or_insert_with(|| {
                let id = u64::from(self.next_id.fetch_add(1, Ordering::Relaxed));
                (Receipt { id, cents }, 0)
            });
            if entry.1 == 0 {
                entry.1 = 1; // the charge is carried out here, once
            }
            entry.0.clone()
        }
    }

    pub(crate) fn router(provider: Arc<Provider>) -> axum::Router {
        axum::Router::new()
            .route("/charges", axum::routing::post(charge))
            .route("/charges/{key}", axum::routing::get(lookup))
            .with_state(provider)
    }

    async fn charge(
        State(p): State<Arc<Provider>>,
        headers: HeaderMap,
        Json(cents): Json<u64>,
    ) -> Response {
        p.requests.fetch_add(1, Ordering::Relaxed);
        let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
            return (StatusCode::BAD_REQUEST, "Idempotency-Key required").into_response();
        };
        let at = p.started.elapsed();
        let f = p.faults;
        if (f.outage.0..f.outage.1).contains(&at) {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        let mut roll = fastrand::u32(0..100);
        let mut hit = |share: u32| {
            let yes = roll < share;
            roll = roll.wrapping_sub(share);
            yes
        };
        if hit(f.unavailable_retry_after_secs) {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
            )
                .into_response();
        }
        if hit(f.too_many_retry_after_date) {
            let date = http_date(SystemTime::now() + Duration::from_secs(1));
            return (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, date)]).into_response();
        }
        if hit(f.drop_before_charging) {
            return dropped_connection();
        }
        let receipt = p.charge_once(key, cents);
        if hit(f.slow_after_charging) {
            tokio::time::sleep(f.slow).await;
        } else if hit(f.drop_after_charging) {
            return dropped_connection();
        }
        Json(receipt).into_response()
    }

    async fn lookup(State(p): State<Arc<Provider>>, Path(key): Path<String>) -> Response {
        match p.charges.lock().unwrap().get(&key) {
            Some((receipt, _)) => Json(receipt.clone()).into_response(),
            None => StatusCode::NOT_FOUND.into_response(),
        }
    }

    /// A response whose body fails at once: hyper closes the connection
    /// mid-response, as a crashed or partitioned server would.
    fn dropped_connection() -> Response {
        struct Broken;
        impl http_body::Body for Broken {
            type Data = Bytes;
            type Error = std::io::Error;
            fn poll_frame(
                self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
                Poll::Ready(Some(Err(std::io::Error::other("connection dropped"))))
            }
        }
        Response::new(Body::new(Broken))
    }

    /// IMF-fixdate (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    fn http_date(t: SystemTime) -> String {
        let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        let days = secs / 86_400;
        // Howard Hinnant's civil_from_days.
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let r = secs % 86_400;
        format!(
            "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
            WEEKDAYS[(days % 7) as usize],
            MONTHS[(m - 1) as usize],
            r / 3600,
            r / 60 % 60,
            r % 60
        )
    }
}

/// How one charge ended, as the client knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Charged,
    /// Failed, and no attempt may have taken effect.
    CertainlyNotCharged,
    /// Failed after a request went out; found charged by key.
    ReconciledCharged,
    /// Failed after a request went out; found not charged by key.
    ReconciledNotCharged,
    /// Failed after a request went out, and the lookup failed too.
    Unknown,
}

#[derive(Default)]
struct Tally {
    done: AtomicU32,
    charged: AtomicU32,
    failed: AtomicU32,
    attempts: AtomicU64,
    results: Mutex<Vec<(String, Outcome, usize, String)>>,
}

/// Charges in flight at most, and how often a new one starts.
const CONCURRENCY: u32 = 32;
const PACE: Duration = Duration::from_millis(25);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let charges: u32 = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| format!("CHARGES must be a number, not {n:?}"))?,
        None => 400,
    };
    client::load_registry()?;
    // Counts the calls in flight, so that a signal can drain them.
    let shutdown = resilient::GracefulShutdown::install();

    let transitions = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let _subscription = {
        let transitions = transitions.clone();
        Registry::global().subscribe(move |event| {
            if let BreakerEvent::StateTransition { from, to, .. } = event {
                transitions
                    .lock()
                    .unwrap()
                    .push((started.elapsed(), *from, *to));
            }
        })
    };

    let provider = provider::Provider::new(provider::FAULTS);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr: SocketAddr = listener.local_addr()?;
    let server =
        tokio::spawn(axum::serve(listener, provider::router(provider.clone())).into_future());
    let base = format!("http://{addr}");
    let f = provider::FAULTS;
    println!(
        "payments: {charges} charges, {CONCURRENCY} at a time, against a provider on {addr} that answers\n  \
         {}% 503 + Retry-After: 1, {}% 429 + Retry-After: <HTTP-date>, {}% slow ({} ms) after charging,\n  \
         {}% dropped before and {}% after charging, and 503 to everything from {} s to {} s.\n",
        f.unavailable_retry_after_secs,
        f.too_many_retry_after_date,
        f.slow_after_charging,
        f.slow.as_millis(),
        f.drop_before_charging,
        f.drop_after_charging,
        f.outage.0.as_secs(),
        f.outage.1.as_secs(),
    );

    let http = reqwest::Client::new();
    let tally = Arc::new(Tally::default());
    let next = Arc::new(AtomicU32::new(0));
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (http, base, tally, next, stopping) = (
            http.clone(),
            base.clone(),
            tally.clone(),
            next.clone(),
            stopping.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= charges || stopping.load(Ordering::Relaxed) {
                    break;
                }
                tokio::time::sleep_until((started + PACE * i).into()).await;
                if stopping.load(Ordering::Relaxed) {
                    break;
                }
                let key = IdempotencyKey::random();
                let cents = fastrand::u64(100..10_000);
                // One unit of work for a graceful shutdown: the charge and,
                // when it may have been made, its reconciliation by key.
                let work = resilient::admitted(async {
                    let (result, report) =
                        resilient::observe(client::charge(&http, &base, &key, cents)).await;
                    // Attempts that reached the provider (not refused locally).
                    let attempts = report
                        .attempts()
                        .iter()
                        .filter(|a| !matches!(a.outcome, AttemptOutcome::Refused(_)))
                        .count();
                    let (outcome, error) = match result {
                        Ok(_) => (Outcome::Charged, String::new()),
                        Err(e) if !report.may_have_taken_effect() => {
                            (Outcome::CertainlyNotCharged, e.to_string())
                        }
                        // The request went out and the answer was lost: look
                        // the charge up by its key instead of guessing.
                        Err(e) => match client::find_charge(&http, &base, &key).await {
                            Ok(Some(_)) => (Outcome::ReconciledCharged, e.to_string()),
                            Ok(None) => (Outcome::ReconciledNotCharged, e.to_string()),
                            Err(_) => (Outcome::Unknown, e.to_string()),
                        },
                    };
                    (outcome, error, attempts)
                })
                .await;
                // Refused: the client is draining; this charge never started.
                let Ok((outcome, error, attempts)) = work else {
                    break;
                };
                let counter = if outcome == Outcome::Charged {
                    &tally.charged
                } else {
                    &tally.failed
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tally.attempts.fetch_add(attempts as u64, Ordering::Relaxed);
                tally.done.fetch_add(1, Ordering::Relaxed);
                tally.results.lock().unwrap().push((
                    key.as_str().to_owned(),
                    outcome,
                    attempts,
                    error,
                ));
            }
        }));
    }

    let progress = {
        let tally = tally.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let state = Registry::global()
                    .breaker("payments")
                    .map(|b| b.state().to_string())
                    .unwrap_or_default();
                println!(
                    "  {:>4.1} s  {:>4}/{charges} done  {:>4} charged  {:>3} failed  breaker {state}",
                    started.elapsed().as_secs_f64(),
                    tally.done.load(Ordering::Relaxed),
                    tally.charged.load(Ordering::Relaxed),
                    tally.failed.load(Ordering::Relaxed),
                );
            }
        })
    };
    let all_done = async {
        for worker in workers {
            worker.await?;
        }
        Ok::<(), tokio::task::JoinError>(())
    };
    let mut drained = None;
    tokio::select! {
        done = all_done => done?,
        () = stop_signal() => {
            // Stop starting charges; refuse new annotated calls; give the
            // charges in flight (retries and lookups included) time to end.
            stopping.store(true, Ordering::Relaxed);
            println!("\n  signal: draining the charges in flight (at most 10 s)");
            drained = Some(shutdown.drain(Duration::from_secs(10)).await);
        }
    }
    progress.abort();
    let elapsed = started.elapsed();
    server.abort();

    summary(&tally, &provider, &transitions.lock().unwrap(), elapsed);
    if let Some(report) = drained {
        println!("  stopped by a signal          {report}");
    }
    Ok(())
}

/// Ctrl-C, or SIGTERM where there is one (what an orchestrator sends).
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            Some(()) = async { term.as_mut()?.recv().await } => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

fn summary(
    tally: &Tally,
    provider: &provider::Provider,
    transitions: &[(Duration, resilient::State, resilient::State)],
    elapsed: Duration,
) {
    let results = tally.results.lock().unwrap();
    let server: HashMap<String, u32> = provider
        .charges
        .lock()
        .unwrap()
        .iter()
        .map(|(k, (_, n))| (k.clone(), *n))
        .collect();
    let count = |o: Outcome| results.iter().filter(|r| r.1 == o).count();
    let executed = server.values().filter(|&&n| n > 0).count();
    let double = server.values().filter(|&&n| n > 1).count();
    // Checks of the client's knowledge against the provider's records.
    let wrongly_not_charged = results
        .iter()
        .filter(|r| {
            matches!(
                r.1,
                Outcome::CertainlyNotCharged | Outcome::ReconciledNotCharged
            ) && server.get(&r.0).is_some_and(|&n| n > 0)
        })
        .count();
    let mut histogram = [0usize; 5];
    for r in results.iter() {
        histogram[r.2.min(4)] += 1;
    }
    let failed = results.len() - count(Outcome::Charged);
    let maybe = count(Outcome::ReconciledCharged)
        + count(Outcome::ReconciledNotCharged)
        + count(Outcome::Unknown);

    println!("\n== summary ({:.1} s)", elapsed.as_secs_f64());
    println!("  charges requested            {}", results.len());
    println!("  charged (client saw success) {}", count(Outcome::Charged));
    println!("  failed                       {failed}");
    println!(
        "    certainly not charged      {}   (no attempt could have taken effect)",
        count(Outcome::CertainlyNotCharged)
    );
    println!(
        "    maybe charged              {maybe}   → looked up by Idempotency-Key: {} charged, {} not charged, {} lookup failed",
        count(Outcome::ReconciledCharged),
        count(Outcome::ReconciledNotCharged),
        count(Outcome::Unknown)
    );
    println!(
        "  executed by the provider     {executed}   (= charged {} + reconciled as charged {})",
        count(Outcome::Charged),
        count(Outcome::ReconciledCharged)
    );
    println!("  double charges               {double}");
    println!("  charged but reported not     {wrongly_not_charged}");
    println!(
        "  requests reaching provider   {}   ({:.2} attempts per charge; 1: {}, 2: {}, 3: {}, 4: {}, none, breaker open: {})",
        provider.requests.load(Ordering::Relaxed),
        // Per charge requested: an interrupted run requests fewer than
        // it planned.
        tally.attempts.load(Ordering::Relaxed) as f64 / results.len().max(1) as f64,
        histogram[1],
        histogram[2],
        histogram[3],
        histogram[4],
        histogram[0],
    );
    let mut reasons: HashMap<&str, usize> = HashMap::new();
    for r in results.iter().filter(|r| r.1 != Outcome::Charged) {
        let reason = if r.3.contains("circuit breaker") {
            "breaker open"
        } else if r.3.contains("HTTP 503") {
            "503"
        } else if r.3.contains("HTTP 429") {
            "429"
        } else if r.3.contains("timed out") || r.3.contains("deadline") {
            "timeout"
        } else if r.3.contains("budget") {
            "retry budget"
        } else {
            "connection lost"
        };
        *reasons.entry(reason).or_default() += 1;
    }
    let mut reasons: Vec<_> = reasons.into_iter().collect();
    reasons.sort();
    println!("  failures by last error       {reasons:?}");
    println!("  breaker transitions          {}", transitions.len());
    for (at, from, to) in transitions {
        println!("    {:>5.2} s  {from} → {to}", at.as_secs_f64());
    }
    println!(
        "  time                         {:.1} s",
        elapsed.as_secs_f64()
    );
    if double > 0 || wrongly_not_charged > 0 {
        println!("\n!! the client's view disagrees with the provider's records");
        std::process::exit(1);
    }
}
