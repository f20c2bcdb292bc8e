//! Graceful shutdown: stop admitting new annotated calls, let the calls in
//! flight finish, up to a bound, and say how many did not.
//!
//! # Cost
//!
//! Knowing how many calls are in flight means counting every call, and a
//! shared counter would be two contended read-modify-writes per call (the
//! two-thread benchmark of issue 10 shows what contention costs). So:
//!
//! * **Until [`GracefulShutdown::install`]**, calls are not counted: each
//!   call pays one relaxed load of a static that never changes, a read of a
//!   shared, clean cache line (well under a nanosecond).
//! * **After it**, each call adds one to a counter of its thread's own shard
//!   (16 shards, one cache line each, threads assigned round-robin) and
//!   takes it back when it ends, also when it is cancelled: two uncontended
//!   atomic read-modify-writes, which also tell it whether a drain started
//!   (the protocol, model-checked with loom, is in `gate.rs`).
//!   Threads never write the same line unless more than 16 threads run
//!   calls; the drain sums the shards.
//!
//! Install it at start-up, before the first call: a call that began before
//! is not counted.
//!
//! # What is refused
//!
//! Once draining, a call made outside any annotated call is refused with
//! [`ErrorKind::ShuttingDown`](crate::ErrorKind::ShuttingDown). Calls
//! nested inside an admitted call, and the retries of admitted calls, still
//! run, as do the calls a fallback makes for a call in flight and
//! [`admitted`] work nested in any of these: refusing them would fail the
//! very calls the drain waits for. A task
//! spawned from inside a call with `tokio::spawn` alone does not carry that
//! call's context (tokio does not pass task-locals to spawned tasks), so its
//! calls count as new; wrapped in [`propagate`](crate::propagate), it does,
//! and it is part of the work in flight until it ends: a drain waits for
//! it, and its calls are admitted. A unit of work that makes
//! several calls in sequence (a request: reserve, then charge) is run under
//! [`admitted`], so that a drain starting between its calls does not leave
//! it half done; `ResilienceLayer` does that for every request it serves.
//! Calls under [`observe`](crate::observe) or a deadline alone are new.

mod gate;

use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::Error;
use crate::sync::SHARDS;
use gate::Entered;

/// Calls are not counted.
const UNTRACKED: u8 = 0;
/// Calls are counted and admitted.
const RUNNING: u8 = 1;
/// Calls are counted; new ones are refused (by the shards' draining bit,
/// see `gate`; this state is what readiness reports).
const DRAINING: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNTRACKED);

/// One shard of the in-flight count, alone on its cache line (128 bytes:
/// adjacent-line prefetching pairs 64-byte lines on x86).
#[repr(align(128))]
struct Shard(AtomicUsize);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: Shard = Shard(AtomicUsize::new(0));
static IN_FLIGHT: [Shard; SHARDS] = [ZERO; SHARDS];

/// Held while a drain or a resume changes the state and the shards' bits.
static TRANSITION: Mutex<()> = Mutex::new(());

/// Wakes a drain when a call ends while draining.
static ENDED: Notify = Notify::const_new();

/// One counted call: dropping it (the call ended, or was cancelled) takes
/// it out of the count.
#[derive(Debug)]
pub(crate) struct InFlight(&'static AtomicUsize);

impl Drop for InFlight {
    fn drop(&mut self) {
        if gate::leave(self.0) {
            ENDED.notify_waiters();
        }
    }
}

/// Admits a call, counting it when shutdown is installed. `nested`: the
/// call runs inside an admitted call (an attempt's frame), so it is part
/// of work already in flight and is admitted while draining.
#[inline]
pub(crate) fn admit(nested: bool) -> Result<Option<InFlight>, Error> {
    if STATE.load(Ordering::Relaxed) == UNTRACKED {
        return Ok(None);
    }
    admit_counted(nested)
}

/// Counts work that has already started (a handler an idempotency layer
/// runs to its end on a task of its own, a future a call spawns through
/// `propagate`) as in flight until the returned guard drops: admitted
/// while draining, as part of work in flight, so a drain waits for it.
pub(crate) fn hold() -> Option<InFlight> {
    admit(true).ok().flatten()
}

fn admit_counted(nested: bool) -> Result<Option<InFlight>, Error> {
    let shard = crate::sync::shard();
    let counter = &IN_FLIGHT[shard].0;
    match gate::enter(counter, nested) {
        Entered::Admitted => Ok(Some(InFlight(counter))),
        Entered::Refused => {
            ENDED.notify_waiters();
            Err(Error::shutting_down())
        }
    }
}

fn shards() -> impl Iterator<Item = &'static AtomicUsize> {
    IN_FLIGHT.iter().map(|s| &s.0)
}

fn in_flight_now() -> usize {
    gate::in_flight(shards())
}

/// Runs `fut` as one unit of work of a graceful shutdown: a request a
/// server handles, a job a worker takes. Refused at once with
/// [`ErrorKind::ShuttingDown`](crate::ErrorKind::ShuttingDown) when the
/// process is already draining, before any of it runs, unless it runs
/// inside work already in flight (an annotated call's attempt or fallback,
/// another `admitted`), which it is then part of; otherwise counted
/// in flight until it ends, and every annotated call inside it (the second
/// step of a request, the reconciliation after a failed charge) is admitted
/// while draining, as part of work the drain waits for.
/// `tower::ResilienceLayer` (feature `tower`) runs each request so.
///
/// Without [`GracefulShutdown::install`] it only runs `fut`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let answer = resilient::admitted(async {
///     // reserve, then charge: both annotated calls run, even if a drain
///     // starts between them
///     42
/// })
/// .await;
/// assert_eq!(answer.unwrap(), 42);
/// # }
/// ```
pub async fn admitted<F: std::future::Future>(fut: F) -> Result<F::Output, Error> {
    let (output, in_flight) = admitted_holding(fut).await?;
    drop(in_flight);
    Ok(output)
}

/// [`admitted`], handing back the unit's place in the count instead of
/// giving it up when `fut` ends: for work that goes on after it (a response
/// body streamed after its handler answered).
pub(crate) async fn admitted_holding<F: std::future::Future>(
    fut: F,
) -> Result<(F::Output, Option<InFlight>), Error> {
    let in_flight = admit(crate::frame::in_call())?;
    let frame = crate::frame::Frame::admitted(crate::current_deadline());
    let output = crate::frame::run_in(frame, fut).await;
    Ok((output, in_flight))
}

/// Is the process draining (new annotated calls refused)?
pub(crate) fn is_draining() -> bool {
    STATE.load(Ordering::Acquire) == DRAINING
}

/// Graceful shutdown of the annotated calls of this process.
///
/// Install it at start-up (from then on calls are counted, see the module
/// docs for the cost); on SIGTERM or Ctrl-C, [`drain`](Self::drain): new
/// calls are refused with [`ErrorKind::ShuttingDown`](crate::ErrorKind::ShuttingDown),
/// [readiness](crate::Readiness) turns not ready, and the drain waits, up to
/// a bound, for the calls in flight.
///
/// ```standalone_crate
/// # // Its own process: merged doctests share one, and a drain there
/// # // would refuse the other examples' calls.
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// use std::time::Duration;
/// use resilient::GracefulShutdown;
///
/// let shutdown = GracefulShutdown::install();
/// // ... serve; then, on SIGTERM:
/// let report = shutdown.drain(Duration::from_secs(20)).await;
/// assert_eq!(report.still_running, 0);
/// # shutdown.resume();
/// # }
/// ```
///
/// The state is the process's: every registry, every task. A drain is
/// meant to end the process; [`resume`](Self::resume) admits calls again
/// (an aborted shutdown, or tests).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct GracefulShutdown;

impl GracefulShutdown {
    /// Starts counting calls in flight, so that a later
    /// [`drain`](Self::drain) can wait for them. Call it at start-up, before
    /// the first annotated call; calling it again changes nothing.
    pub fn install() -> GracefulShutdown {
        let _ = STATE.compare_exchange(UNTRACKED, RUNNING, Ordering::SeqCst, Ordering::SeqCst);
        GracefulShutdown
    }

    /// Work running now (counted since [`install`](Self::install)): each
    /// annotated call, nested calls included, and each unit of work begun
    /// with [`admitted`](crate::admitted) (a `ResilienceLayer` makes every
    /// request one). So one request whose handler is in one annotated call
    /// counts 2.
    pub fn in_flight(&self) -> usize {
        in_flight_now()
    }

    /// Is the process draining: new annotated calls refused?
    pub fn is_draining(&self) -> bool {
        is_draining()
    }

    /// Stops admitting new annotated calls and waits until every call in
    /// flight has ended or `within` has passed, whichever comes first.
    /// Returns how many calls were still running then. Calls are never
    /// cancelled by the drain: dropping them (ending the process, or the
    /// server's own shutdown) is the caller's decision.
    pub async fn drain(&self, within: Duration) -> DrainReport {
        {
            // The state and the shards' bits change together: a `resume`
            // racing this drain must not leave the bits set while running.
            let _transition = TRANSITION.lock().unwrap_or_else(PoisonError::into_inner);
            // The shards refuse first: once `is_draining` says so, no new
            // call is admitted (review 27 saw one admitted in between).
            gate::start_drain(shards());
            STATE.store(DRAINING, Ordering::SeqCst);
        }
        let started = Instant::now();
        let until = started.checked_add(within);
        loop {
            let ended = ENDED.notified();
            tokio::pin!(ended);
            // Registered before counting: a call that ends after the count
            // wakes this drain.
            ended.as_mut().enable();
            let running = in_flight_now();
            if running == 0 {
                return DrainReport {
                    still_running: 0,
                    waited: started.elapsed(),
                };
            }
            let timed_out = match until {
                Some(until) => tokio::time::timeout_at(until, ended).await.is_err(),
                None => {
                    ended.await;
                    false
                }
            };
            if timed_out {
                return DrainReport {
                    still_running: in_flight_now(),
                    waited: started.elapsed(),
                };
            }
        }
    }

    /// Admits new calls again (calls stay counted).
    pub fn resume(&self) {
        let _transition = TRANSITION.lock().unwrap_or_else(PoisonError::into_inner);
        if STATE
            .compare_exchange(DRAINING, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            gate::resume(shards());
        }
    }
}

/// What a [`GracefulShutdown::drain`] found when it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Work still running when the drain stopped waiting, counted as
    /// [`GracefulShutdown::in_flight`] counts it (annotated calls and
    /// units of work begun with [`admitted`](crate::admitted), so one
    /// request stuck in one annotated call counts 2): 0 when all of it
    /// finished in time.
    pub still_running: usize,
    /// How long the drain waited.
    pub waited: Duration,
}

impl DrainReport {
    /// Did every call in flight finish in time?
    pub fn is_clean(&self) -> bool {
        self.still_running == 0
    }
}

impl fmt::Display for DrainReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_clean() {
            write!(f, "every call finished within {:?}", self.waited)
        } else {
            write!(
                f,
                "{} call(s) still running after {:?}",
                self.still_running, self.waited
            )
        }
    }
}
