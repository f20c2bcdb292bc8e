//! The task's resilience context: its deadline, and whether a nested layer
//! has already given up on a failure.
//!
//! Both live in tokio task-locals, so they follow a call through every
//! `.await` of the task that made it, without being passed as arguments:
//!
//! * **Deadline.** Each annotated call with `deadline_ms` (and each attempt
//!   with `timeout_ms`) runs its body with the deadline `min(inherited, now +
//!   N)`: a nested call never gets a longer budget than its caller has left.
//!   Concurrent calls in one task (`join!`) each see their own deadline,
//!   because each call's value is scoped to its own future.
//! * **Give-up marker.** When a layer stops retrying a retryable failure
//!   (its retries are spent, its budget or breaker refuses, its deadline is
//!   too close), it marks the task's retry scope. An enclosing layer whose
//!   attempt saw that mark returns the failure without retrying it, so only
//!   the layer closest to the failing dependency retries (see the crate docs,
//!   "One retrying layer").
//!
//! A spawned task starts with neither: tokio does not carry task-locals
//! across `spawn`. Wrap the spawned future in [`propagate`] to give it the
//! spawner's deadline (and its scoped [`Registry`](crate::Registry)). The give-up marker is deliberately not carried: the
//! spawned task is its own retry scope, and a spawner that awaits its
//! `JoinHandle` sees only the outcome.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;

tokio::task_local! {
    static DEADLINE: Option<Instant>;
    static RETRY_SCOPE: RetryScope;
}

/// Counts the times a nested layer gave up on a retryable failure in this task.
#[derive(Debug, Default)]
pub(crate) struct RetryScope {
    gave_up: Cell<u64>,
}

/// The current task's deadline, if a caller set one.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
///
/// assert_eq!(resilient::current_deadline(), None);
/// resilient::with_deadline(Duration::from_secs(2), async {
///     assert!(resilient::current_deadline().is_some());
/// })
/// .await
/// .unwrap();
/// # }
/// ```
pub fn current_deadline() -> Option<Instant> {
    DEADLINE.try_with(|d| *d).ok().flatten()
}

/// Time left before the current task's deadline (zero once it has passed),
/// or `None` when no deadline is set.
///
/// Use it to size work, or to pass the budget on to another service (see
/// [`GrpcTimeout`](crate::GrpcTimeout)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// use std::time::Duration;
///
/// resilient::with_deadline(Duration::from_millis(500), async {
///     tokio::time::sleep(Duration::from_millis(200)).await;
///     assert_eq!(resilient::remaining(), Some(Duration::from_millis(300)));
/// })
/// .await
/// .unwrap();
/// # }
/// ```
pub fn remaining() -> Option<Duration> {
    current_deadline().map(|d| d.saturating_duration_since(Instant::now()))
}

/// Runs `fut` within `budget` of now, or within the inherited deadline if
/// that is sooner. Annotated calls inside inherit the deadline.
///
/// Returns `Err` with [`ErrorKind::DeadlineExceeded`](crate::ErrorKind) if
/// the deadline passes first (the future is dropped), or at once without
/// polling `fut` if the inherited deadline has already passed.
pub async fn with_deadline<F: Future>(budget: Duration, fut: F) -> Result<F::Output, Error> {
    let deadline = Instant::now().checked_add(budget);
    with_deadline_at_opt(deadline, fut).await
}

/// Like [`with_deadline`], with the deadline given as an instant.
pub async fn with_deadline_at<F: Future>(deadline: Instant, fut: F) -> Result<F::Output, Error> {
    with_deadline_at_opt(Some(deadline), fut).await
}

async fn with_deadline_at_opt<F: Future>(
    deadline: Option<Instant>,
    fut: F,
) -> Result<F::Output, Error> {
    match earliest(current_deadline(), deadline) {
        None => Ok(fut.await),
        Some(d) if Instant::now() >= d => Err(Error::deadline_exceeded()),
        Some(d) => tokio::time::timeout_at(d, DEADLINE.scope(Some(d), fut))
            .await
            .map_err(|_| Error::deadline_exceeded()),
    }
}

/// Gives `fut` the current task's deadline and registry, for a future about
/// to be spawned: `tokio::spawn(resilient::propagate(work))`.
///
/// Both are captured when `propagate` is called. The spawned task is its own
/// retry scope (see the module docs).
pub fn propagate<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let registry = crate::Registry::scoped();
    let fut = DEADLINE.scope(current_deadline(), fut);
    async move {
        match registry {
            Some(registry) => registry.scope(fut).await,
            None => fut.await,
        }
    }
}

/// The sooner of two optional deadlines.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Runs `fut` with `deadline` as the task's deadline.
pub(crate) fn scope_deadline<F: Future>(
    deadline: Option<Instant>,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Option<Instant>, F> {
    DEADLINE.scope(deadline, fut)
}

/// `true` when some enclosing layer of this task may retry, so giving up
/// must be reported to it.
pub(crate) fn in_retry_scope() -> bool {
    RETRY_SCOPE.try_with(|_| ()).is_ok()
}

/// Opens the task's retry scope; called by the outermost layer that retries.
pub(crate) fn scope_retries<F: Future>(
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<RetryScope, F> {
    RETRY_SCOPE.scope(RetryScope::default(), fut)
}

/// How many times a layer has given up in this task so far (0 outside a scope).
pub(crate) fn give_ups() -> u64 {
    RETRY_SCOPE.try_with(|s| s.gave_up.get()).unwrap_or(0)
}

/// Reports that this layer gave up on a failure enclosing layers must not retry.
pub(crate) fn mark_gave_up() {
    let _ = RETRY_SCOPE.try_with(|s| s.gave_up.set(s.gave_up.get().wrapping_add(1)));
}

/// Takes back the give-ups reported since `mark` (a value of
/// [`give_ups`]): a layer whose fallback answered did not, in the end, fail.
pub(crate) fn restore_give_ups(mark: u64) {
    let _ = RETRY_SCOPE.try_with(|s| s.gave_up.set(mark));
}
