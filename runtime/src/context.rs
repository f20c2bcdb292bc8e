//! The task's deadline.
//!
//! It lives in a tokio task-local, so it follows a call through every
//! `.await` of the task that made it, without being passed as an argument.
//! Each annotated call with `deadline_ms` (and each attempt with
//! `timeout_ms`) runs its body with the deadline `min(inherited, now + N)`:
//! a nested call never gets a longer budget than its caller has left.
//! Concurrent calls in one task (`join!`) each see their own deadline,
//! because each call's value is scoped to its own future.
//!
//! What nested calls tell the attempt that encloses them (how many attempts
//! they made, whether they gave up) is the attempt frame's, in `frame.rs`.
//!
//! A spawned task starts with no deadline: tokio does not carry task-locals
//! across `spawn`. Wrap the spawned future in [`propagate`] to give it the
//! spawner's deadline (and its scoped [`Registry`](crate::Registry)). The
//! spawned task is a new path: its attempts are its own, and a spawner that
//! awaits its `JoinHandle` sees only the outcome.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::frame::{Frame, InFrame, forward};

/// How far ahead a timer is ever set: deadlines further than this are as
/// good as none, and tokio's timer cannot hold an instant near the largest
/// one. Thirty years, the horizon tokio's own `sleep` uses for a duration
/// that does not fit.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// The instant to set a timer for `deadline`: itself, or [`FAR_FUTURE`]
/// from now if it is further.
pub(crate) fn timer_at(deadline: Instant) -> Instant {
    match Instant::now().checked_add(FAR_FUTURE) {
        Some(far) => deadline.min(far),
        None => deadline,
    }
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
    crate::frame::deadline()
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
/// polling `fut` if the inherited deadline has already passed. A budget
/// too large to represent means no deadline of its own; one of years is
/// timed no further ahead than tokio's own `sleep` would (30 years).
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
    let inherited = current_deadline();
    // `cut`: the work was running (it may have taken effect), not refused
    // before it began.
    let passed = |d: Instant, cut: bool| {
        // An inherited deadline is the enclosing attempt's timer.
        if Some(d) == inherited {
            crate::frame::report_deadline(inherited);
        }
        if cut {
            Error::deadline_cut()
        } else {
            Error::deadline_exceeded()
        }
    };
    match earliest(inherited, deadline) {
        None => Ok(fut.await),
        Some(d) if Instant::now() >= d => Err(passed(d, false)),
        // Not sooner than the inherited one: nothing changes inside.
        Some(d) if Some(d) == inherited => tokio::time::timeout_at(timer_at(d), fut)
            .await
            .map_err(|_| passed(d, true)),
        Some(d) => {
            let frame = InFrame::new(Frame::transparent(Some(d), false), fut);
            match tokio::time::timeout_at(timer_at(d), frame).await {
                Ok((output, end)) => {
                    forward(&end);
                    Ok(output)
                }
                Err(_) => Err(passed(d, true)),
            }
        }
    }
}

/// Gives `fut` the current task's deadline and registry, for a future about
/// to be spawned: `tokio::spawn(resilient::propagate(work))`.
///
/// Both are captured when `propagate` is called. The spawned task is a new
/// path for counting attempts (see the module docs): a retrying layer that
/// awaits a spawned retrying call multiplies their attempts, so keep the
/// retrying on one side of the spawn.
///
/// Called inside work a [`GracefulShutdown`](crate::GracefulShutdown)
/// counts (an annotated call, [`admitted`](crate::admitted)), the spawned
/// future is part of that work: counted in flight from this call until it
/// ends or is dropped, so a drain waits for it, and its calls are admitted
/// while draining. Work that outlives its call (a refresh, an audit write)
/// is then finished, or reported still running, by the drain, never cut
/// after a clean report; a task that never ends (a poller) keeps every
/// drain waiting to its bound, so start such a task outside any call.
pub fn propagate<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    // Taken now, while the call that spawns it is counted: no drain can end
    // between the two (review 38: the drain reported every call finished,
    // and then admitted the spawned task's call).
    let held = if crate::frame::in_call() {
        crate::shutdown::hold()
    } else {
        None
    };
    propagate_holding(fut, held)
}

/// [`propagate`], counting the future in flight with `held` (taken by the
/// caller) until it ends or is dropped. Work counted so is work in flight:
/// its calls are admitted while draining, as an admitted call's are, also
/// when the caller is in no call (review 39: `IdempotencyLayer` without
/// `ResilienceLayer` counted its handler, and the drain refused the
/// handler's second call, leaving it half done).
pub(crate) fn propagate_holding<F: Future>(
    fut: F,
    held: Option<crate::shutdown::InFlight>,
) -> impl Future<Output = F::Output> {
    let registry = crate::Registry::scoped();
    let in_call = held.is_some() || crate::frame::in_call();
    let fut = crate::frame::scope_spawned(current_deadline(), in_call, fut);
    async move {
        let _held = held;
        let (output, _) = match registry {
            Some(registry) => registry.scope(fut).await,
            None => fut.await,
        };
        output
    }
}

/// The sooner of two optional deadlines.
#[inline]
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
