//! Work spawned through `propagate` from inside counted work is counted in
//! flight until it ends or is dropped, whatever ends it (a panic, an abort,
//! a dropped `JoinSet`, the runtime shutting down, never being polled),
//! and a drain waits for it and admits its calls, also when it comes from
//! an attempt of a retried call, a fallback, other propagated work, or
//! starts during the drain (review 39, which found these holding). The
//! shutdown state is the process's, so these tests take turns.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resilient::{Classification, Classify, ErrorKind, GracefulShutdown, resilient};
use tokio::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

#[derive(Debug)]
enum E {
    Flaky,
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
            E::Flaky => Classification::Transient,
            E::Refused(e) => e.classify(),
        }
    }
}

fn refusal<T>(result: &Result<T, E>) -> Option<ErrorKind> {
    match result {
        Err(E::Refused(e)) => Some(e.kind()),
        _ => None,
    }
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[resilient(timeout_ms = 1_000)]
async fn leaf() -> Result<u32, E> {
    Ok(1)
}

// ---------------------------------------------------------------- panics

#[resilient(deadline_ms = 60_000)]
async fn spawns_panicking() -> Result<tokio::task::JoinHandle<()>, E> {
    Ok(tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        panic!("boom in propagated work");
    })))
}

#[tokio::test(start_paused = true)]
async fn a_panicking_propagated_future_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let h = spawns_panicking().await.unwrap();
    assert_eq!(shutdown.in_flight(), 1);
    assert!(h.await.unwrap_err().is_panic());
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- retries

static RETRY_FAILS: AtomicU32 = AtomicU32::new(0);
static RETRY_SPAWNED_DONE: AtomicU32 = AtomicU32::new(0);

#[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 1)]
async fn spawns_each_attempt() -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let r = leaf().await;
        assert!(r.is_ok(), "a call of propagated work is admitted: {r:?}");
        RETRY_SPAWNED_DONE.fetch_add(1, Ordering::SeqCst);
    }));
    if RETRY_FAILS
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return Err(E::Flaky);
    }
    Ok(7)
}

#[tokio::test(start_paused = true)]
async fn propagate_in_each_attempt_of_a_retried_call_is_counted_once_each() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    RETRY_FAILS.store(2, Ordering::SeqCst);
    RETRY_SPAWNED_DONE.store(0, Ordering::SeqCst);
    assert_eq!(spawns_each_attempt().await.unwrap(), 7);
    settle().await;
    assert_eq!(shutdown.in_flight(), 3);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(RETRY_SPAWNED_DONE.load(Ordering::SeqCst), 3);
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- nested

static NESTED_INNER: AtomicU32 = AtomicU32::new(0);

#[resilient(deadline_ms = 60_000)]
async fn spawns_nested() -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        // Outside any annotated call, but inside counted work.
        tokio::spawn(resilient::propagate(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let r = leaf().await;
            if r.is_ok() {
                NESTED_INNER.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }));
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn propagate_inside_propagated_work_is_waited_for() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    NESTED_INNER.store(0, Ordering::SeqCst);
    spawns_nested().await.unwrap();
    settle().await;
    assert_eq!(shutdown.in_flight(), 1, "the outer ended, the inner runs");
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(NESTED_INNER.load(Ordering::SeqCst), 1);
    assert_eq!(report.waited, Duration::from_secs(5));
}

// ---------------------------------------------------------------- fallback

static FALLBACK_SPAWNED: AtomicU32 = AtomicU32::new(0);

async fn fb_spawns(_: E) -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        if leaf().await.is_ok() {
            FALLBACK_SPAWNED.fetch_add(1, Ordering::SeqCst);
        }
    }));
    Ok(9)
}

#[resilient(fallback = fb_spawns)]
async fn fails_to_fallback() -> Result<u32, E> {
    Err(E::Flaky)
}

#[tokio::test(start_paused = true)]
async fn propagate_in_a_fallback_is_waited_for() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    FALLBACK_SPAWNED.store(0, Ordering::SeqCst);
    assert_eq!(fails_to_fallback().await.unwrap(), 9);
    settle().await;
    assert_eq!(shutdown.in_flight(), 1);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(FALLBACK_SPAWNED.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------- never polled

#[tokio::test(start_paused = true)]
async fn a_propagated_future_never_polled_and_dropped_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    // Made inside the unit of work, never awaited: on purpose.
    #[allow(clippy::async_yields_async)]
    let fut = resilient::admitted(async { resilient::propagate(async { 1 }) })
        .await
        .unwrap();
    assert_eq!(shutdown.in_flight(), 1);
    drop(fut);
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- runtime shutdown

#[test]
fn runtime_shutdown_with_propagated_work_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.blocking_lock();
    let shutdown = GracefulShutdown::install();
    for flavor in 0..2 {
        let rt = if flavor == 0 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        };
        rt.block_on(async {
            resilient::admitted(async {
                tokio::spawn(resilient::propagate(async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }));
                // And one spawned but never polled (spawned from a
                // blocking thread after the runtime's last poll).
            })
            .await
            .unwrap();
            settle().await;
        });
        assert_eq!(shutdown.in_flight(), 1, "flavor {flavor}");
        drop(rt);
        assert_eq!(shutdown.in_flight(), 0, "flavor {flavor}");
    }
}

#[test]
fn runtime_shutdown_background_with_propagated_work_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.blocking_lock();
    let shutdown = GracefulShutdown::install();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        resilient::admitted(async {
            for _ in 0..10 {
                tokio::spawn(resilient::propagate(async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }));
            }
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    });
    assert_eq!(shutdown.in_flight(), 10);
    rt.shutdown_timeout(Duration::from_secs(5));
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- drain: still_running exact

#[tokio::test(start_paused = true)]
async fn still_running_counts_propagated_work_past_the_bound() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let handles = resilient::admitted(async {
        (0..3)
            .map(|i| {
                tokio::spawn(resilient::propagate(async move {
                    tokio::time::sleep(Duration::from_secs(10 * (i + 1))).await;
                }))
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    settle().await;
    let report = shutdown.drain(Duration::from_secs(15)).await;
    assert_eq!(report.still_running, 2, "{report}");
    assert_eq!(report.waited, Duration::from_secs(15));
    for h in handles {
        h.abort();
        let _ = h.await;
    }
    assert_eq!(shutdown.in_flight(), 0);
    shutdown.resume();
}

// ---------------------------------------------------------------- drain: calls during drain

#[tokio::test(start_paused = true)]
async fn propagated_work_started_during_the_drain_is_admitted_and_waited_for() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    static DONE: AtomicU32 = AtomicU32::new(0);
    DONE.store(0, Ordering::SeqCst);
    let unit = tokio::spawn(resilient::admitted(async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // The drain has begun: the unit spawns follow-up work.
        tokio::spawn(resilient::propagate(async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let r = leaf().await;
            assert!(refusal(&r).is_none(), "{r:?}");
            DONE.fetch_add(1, Ordering::SeqCst);
        }));
    }));
    settle().await;
    let drain = tokio::spawn(async move { shutdown.drain(Duration::from_secs(30)).await });
    settle().await;
    let report = drain.await.unwrap();
    unit.await.unwrap().unwrap();
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.waited, Duration::from_secs(4));
    assert_eq!(DONE.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------- select! cancel

#[resilient(deadline_ms = 60_000)]
async fn spawns_and_hangs() -> Result<u32, E> {
    tokio::spawn(resilient::propagate(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }));
    std::future::pending::<()>().await;
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_leaves_its_propagated_work_counted_until_it_ends() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let r = tokio::time::timeout(Duration::from_millis(100), spawns_and_hangs()).await;
    assert!(r.is_err());
    assert_eq!(shutdown.in_flight(), 1);
    let report = shutdown.drain(Duration::from_secs(30)).await;
    shutdown.resume();
    assert!(report.is_clean(), "{report}");
    assert_eq!(shutdown.in_flight(), 0);
}

// ---------------------------------------------------------------- JoinSet

#[tokio::test(start_paused = true)]
async fn a_joinset_dropped_leaves_the_count() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let shutdown = GracefulShutdown::install();
    let set = resilient::admitted(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..5 {
            set.spawn(resilient::propagate(tokio::time::sleep(
                Duration::from_secs(100),
            )));
        }
        set
    })
    .await
    .unwrap();
    settle().await;
    assert_eq!(shutdown.in_flight(), 5);
    drop(set);
    settle().await;
    assert_eq!(shutdown.in_flight(), 0);
}
