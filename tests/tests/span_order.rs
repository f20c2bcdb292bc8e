//! A call leaves the work in flight (`GracefulShutdown`'s count) before
//! its span closes, also when it is dropped in the retry loop: in its
//! backoff or during a retry, with or without parts, on the global registry
//! or a scoped one (review 41: the span closed first there).
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::Poll;
use std::time::Duration;

use resilient::{Classification, Classify, GracefulShutdown, Registry, resilient};
use tracing_subscriber::layer::SubscriberExt;

#[derive(Debug)]
pub struct E;
impl From<resilient::Error> for E {
    fn from(_: resilient::Error) -> Self {
        E
    }
}
impl Classify for E {
    fn classify(&self) -> Classification {
        Classification::Transient
    }
}

static AT_CLOSE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

struct InFlightAtClose;
impl<S> tracing_subscriber::Layer<S> for InFlightAtClose
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if ctx.span(&id).is_some_and(|s| s.name() == "resilient") {
            AT_CLOSE
                .lock()
                .unwrap()
                .push(GracefulShutdown::install().in_flight());
        }
    }
}

pub async fn poll_once<F: Future + ?Sized>(mut fut: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

#[resilient(retries = 2, idempotent)]
async fn fails_lean() -> Result<u32, E> {
    Err(E)
}

#[resilient(retries = 2, idempotent, breaker = "o-parts")]
async fn fails_parts() -> Result<u32, E> {
    Err(E)
}

#[resilient(retries = 2, idempotent)]
async fn fails_then_hangs(first: &std::sync::atomic::AtomicBool) -> Result<u32, E> {
    if !first.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(E);
    }
    std::future::pending::<()>().await;
    Ok(1)
}

fn take() -> Vec<usize> {
    std::mem::take(&mut *AT_CLOSE.lock().unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_call_leaves_the_work_in_flight_before_its_span_closes() {
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(InFlightAtClose))
        .unwrap();
    let shutdown = GracefulShutdown::install();
    assert_eq!(shutdown.in_flight(), 0);

    // Ended by the retry loop: 0 at close.
    let _ = fails_lean().await;
    let mut seen = vec![("retries spent", take())];

    // Dropped in its backoff, boxed retry loop (no parts).
    let mut f = Box::pin(fails_lean());
    assert!(poll_once(f.as_mut()).await.is_pending());
    assert_eq!(shutdown.in_flight(), 1);
    drop(f);
    assert_eq!(shutdown.in_flight(), 0);
    seen.push(("dropped in its backoff (lean, boxed loop)", take()));

    // Dropped in its backoff, held retry loop (parts, global registry).
    let mut f = Box::pin(fails_parts());
    assert!(poll_once(f.as_mut()).await.is_pending());
    drop(f);
    seen.push(("dropped in its backoff (parts)", take()));

    // Dropped during its retry attempt.
    let first = std::sync::atomic::AtomicBool::new(false);
    let mut f = Box::pin(fails_then_hangs(&first));
    assert!(poll_once(f.as_mut()).await.is_pending());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(poll_once(f.as_mut()).await.is_pending());
    drop(f);
    seen.push(("dropped during a retry", take()));

    // Scoped registry: the loop runs from the first attempt.
    let reg = Registry::builder().build().unwrap();
    let mut f = Box::pin(reg.scope(fails_parts()));
    assert!(poll_once(f.as_mut()).await.is_pending());
    drop(f);
    seen.push(("dropped in its backoff (scoped)", take()));
    let bad: Vec<_> = seen.iter().filter(|(_, v)| v != &vec![0]).collect();
    assert!(
        bad.is_empty(),
        "calls in flight when their span closed: {bad:?}"
    );
}
