//! Bulkheads on tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use resilient::{Bulkhead, BulkheadConfig, ErrorKind};
use tokio::time::{Instant, advance, sleep};

fn bulkhead(max: usize, wait_ms: u64) -> Arc<Bulkhead> {
    let config = BulkheadConfig::default()
        .max_concurrent(max)
        .max_wait(Duration::from_millis(wait_ms));
    Arc::new(Bulkhead::new("inventory", config).unwrap())
}

#[tokio::test(start_paused = true)]
async fn the_call_beyond_max_concurrent_is_refused_at_once() {
    let bulkhead = bulkhead(2, 0);
    let first = bulkhead.acquire(None).await.unwrap();
    let second = bulkhead.try_acquire().unwrap();
    assert_eq!(bulkhead.in_flight(), 2);

    let started = Instant::now();
    let err = bulkhead.acquire(None).await.unwrap_err();
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "waited with max_wait = 0"
    );
    assert_eq!(err.kind(), ErrorKind::BulkheadFull);
    assert_eq!(err.name(), Some("inventory"));
    assert!(err.to_string().contains("inventory"), "{err}");
    let err = bulkhead.try_acquire().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BulkheadFull);

    let s = bulkhead.snapshot();
    assert_eq!(
        (s.name.as_str(), s.max_concurrent, s.in_flight, s.rejected),
        ("inventory", 2, 2, 2)
    );
    drop((first, second));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_permit_gives_its_slot_back() {
    let bulkhead = bulkhead(1, 0);
    let permit = bulkhead.try_acquire().unwrap();
    assert!(bulkhead.try_acquire().is_err());
    drop(permit);
    assert_eq!(bulkhead.in_flight(), 0);
    let _again = bulkhead.try_acquire().expect("the slot was not given back");
}

#[tokio::test(start_paused = true)]
async fn default_is_25_slots_and_no_waiting() {
    let bulkhead = Bulkhead::new("inventory", BulkheadConfig::default()).unwrap();
    let permits: Vec<_> = (0..25).map(|_| bulkhead.try_acquire().unwrap()).collect();
    let started = Instant::now();
    assert!(bulkhead.acquire(None).await.is_err());
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(bulkhead.snapshot().max_concurrent, 25);
    drop(permits);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gets_the_slot_freed_within_max_wait() {
    let bulkhead = bulkhead(1, 100);
    let permit = bulkhead.try_acquire().unwrap();
    let release = async {
        sleep(Duration::from_millis(40)).await;
        drop(permit);
    };
    let wait = async {
        let started = Instant::now();
        let permit = bulkhead.acquire(None).await;
        (permit, started.elapsed())
    };
    let ((), (permit, waited)) = tokio::join!(release, wait);
    let _permit = permit.expect("the freed slot was not handed over");
    assert_eq!(waited, Duration::from_millis(40));
    assert_eq!(bulkhead.in_flight(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_refused_when_max_wait_passes() {
    let bulkhead = bulkhead(1, 100);
    let _held = bulkhead.try_acquire().unwrap();
    let started = Instant::now();
    let err = bulkhead.acquire(None).await.unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    assert_eq!(err.kind(), ErrorKind::BulkheadFull);
    assert_eq!(bulkhead.snapshot().rejected, 1);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_shorter_than_max_wait_bounds_the_wait() {
    let bulkhead = bulkhead(1, 1000);
    let _held = bulkhead.try_acquire().unwrap();
    let started = Instant::now();
    let err = bulkhead
        .acquire(Some(started + Duration::from_millis(30)))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(30));
    assert_eq!(err.kind(), ErrorKind::BulkheadFull);

    // A deadline already past does not wait at all.
    let err = bulkhead.acquire(Some(Instant::now())).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BulkheadFull);
    assert_eq!(started.elapsed(), Duration::from_millis(30));

    // A deadline later than max_wait leaves max_wait in charge.
    let started = Instant::now();
    bulkhead
        .acquire(Some(started + Duration::from_secs(60)))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(1000));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_leaks_nothing() {
    let bulkhead = bulkhead(1, 1000);
    let held = bulkhead.try_acquire().unwrap();

    // A waiter whose future is dropped while it waits (the caller's own
    // timeout fired).
    let cancelled = tokio::time::timeout(Duration::from_millis(10), bulkhead.acquire(None)).await;
    assert!(cancelled.is_err());
    assert_eq!(bulkhead.in_flight(), 1);

    // One waiter that will be cancelled registers first, a live one second.
    // The freed slot's wake-up goes to the first (tokio's `Notify` wakes the
    // longest waiter); dropping it must pass the wake-up on, or the live
    // waiter sleeps out its whole `max_wait`.
    let mut doomed = Box::pin(bulkhead.acquire(None));
    assert!(poll_once(doomed.as_mut()).await.is_none());
    let waiter = {
        let bulkhead = bulkhead.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let permit = bulkhead.acquire(None).await;
            (permit.is_ok(), started.elapsed())
        })
    };
    tokio::task::yield_now().await;
    drop(held);
    drop(doomed);
    let (got, waited) = waiter.await.unwrap();
    assert!(got, "the live waiter did not get the freed slot");
    assert!(waited < Duration::from_millis(1000), "waited {waited:?}");
    assert_eq!(bulkhead.in_flight(), 0, "a slot leaked");
    let _all_free = bulkhead.try_acquire().unwrap();
}

/// Polls a future once, returning its output if it was ready.
async fn poll_once<F: std::future::Future + Unpin>(fut: F) -> Option<F::Output> {
    let mut fut = fut;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut fut).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_one_slot_each() {
    let bulkhead = bulkhead(2, 500);
    let served = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let bulkhead = bulkhead.clone();
            let served = served.clone();
            tokio::spawn(async move {
                let _permit = bulkhead.acquire(None).await.unwrap();
                served.fetch_add(1, Ordering::SeqCst);
                assert!(bulkhead.in_flight() <= 2);
                sleep(Duration::from_millis(100)).await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(served.load(Ordering::SeqCst), 6);
    assert_eq!(bulkhead.in_flight(), 0);
    advance(Duration::from_millis(1)).await;
}

/// Many tasks on four worker threads hammer a small bulkhead, some waiting,
/// some cancelled mid-wait: the calls inside never exceed the limit, and
/// every slot comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_flight_never_exceeds_max_under_stress() {
    let bulkhead = bulkhead(3, 5);
    let inside = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let bulkhead = bulkhead.clone();
            let inside = inside.clone();
            let peak = peak.clone();
            tokio::spawn(async move {
                for j in 0..50 {
                    let acquire = bulkhead.acquire(None);
                    let permit = if (i + j) % 7 == 0 {
                        // Cancelled while it may be waiting.
                        match tokio::time::timeout(Duration::from_micros(50), acquire).await {
                            Ok(permit) => permit,
                            Err(_) => continue,
                        }
                    } else {
                        acquire.await
                    };
                    let Ok(_permit) = permit else { continue };
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    assert!(bulkhead.in_flight() <= 3);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 3, "{peak} calls inside a bulkhead of 3");
    assert_eq!(bulkhead.in_flight(), 0, "a slot leaked");
    assert!(peak >= 2, "the stress test did not overlap calls");
}
