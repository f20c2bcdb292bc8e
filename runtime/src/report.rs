//! What the annotated calls inside one future did: [`observe`].
//!
//! A failed call does not always mean nothing happened. When an attempt
//! timed out, or its connection broke after the request went out, the
//! dependency may have done the work (a card charged, the answer lost).
//! The function's signature cannot say so without changing it; a report
//! can, on request, without costing anything to calls nobody observes.

use std::cell::RefCell;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use crate::frame::Frame;
use crate::{Classification, ErrorKind};

tokio::task_local! {
    static REPORT: RefCell<Sink>;
}

/// What one task's `observe` (or [`linked`] scope) collects.
#[derive(Default)]
struct Sink {
    report: Report,
    /// Where every record also goes as it is made: the report of an
    /// `observe` in another task, which this task's work is part of.
    forward: Option<Link>,
    /// What tasks linked to this `observe` recorded ([`link`]): merged
    /// into its report when it is read.
    linked: Option<Link>,
}

/// A report shared with work on other tasks.
pub(crate) type Link = Arc<Mutex<Report>>;

impl Sink {
    fn push(&mut self, record: AttemptRecord) {
        if let Some(forward) = &self.forward {
            lock(forward).attempts.push(record);
        }
        self.report.attempts.push(record);
    }

    fn give_up(&mut self) {
        if let Some(forward) = &self.forward {
            lock(forward).gave_up = true;
        }
        self.report.gave_up = true;
    }
}

fn lock(link: &Link) -> std::sync::MutexGuard<'_, Report> {
    // A report is plain data: one a panicking task left half-written is
    // still worth reading.
    link.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A link to the `observe` the current task runs in, if any, for work it
/// hands to another task ([`linked`]): what that work's annotated calls
/// do is then in this `observe`'s report too, as they do it (also if this
/// task stops waiting for it: a server layer's deadline that cuts the
/// request while the work goes on).
#[cfg(feature = "tower")]
pub(crate) fn link() -> Option<Link> {
    REPORT
        .try_with(|sink| {
            let mut sink = sink.borrow_mut();
            // Records already forwarded further out go on there.
            if let Some(forward) = &sink.forward {
                return forward.clone();
            }
            sink.linked.get_or_insert_with(Link::default).clone()
        })
        .ok()
}

/// Runs `fut` (on another task) as part of the `observe` `link` came from.
#[cfg(feature = "tower")]
pub(crate) async fn linked<F: Future>(link: Option<Link>, fut: F) -> F::Output {
    match link {
        None => fut.await,
        Some(link) => {
            let sink = Sink {
                forward: Some(link),
                ..Sink::default()
            };
            REPORT.scope(RefCell::new(sink), fut).await
        }
    }
}

/// Runs `fut` and returns, with its output, a [`Report`] of every attempt
/// the annotated calls inside it made.
///
/// Use it where a failure must be reconciled: when the report says the
/// call [may have taken effect](Report::may_have_taken_effect), look the
/// operation up by its [`IdempotencyKey`](crate::IdempotencyKey) before
/// doing it again or telling the user it failed:
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// use std::time::Duration;
/// use resilient::{IdempotencyKey, resilient};
///
/// #[resilient(retries = 1, timeout_ms = 100)]
/// async fn charge(key: &IdempotencyKey) -> Result<(), std::io::Error> {
///     // The provider charges, then the answer never comes back.
///     std::future::pending::<()>().await;
///     Ok(())
/// }
///
/// let key = IdempotencyKey::random();
/// let (result, report) = resilient::observe(charge(&key)).await;
/// assert!(result.is_err());
/// assert_eq!(report.attempts().len(), 2);
/// if report.may_have_taken_effect() {
///     // Reconcile: ask the provider for the charge made with `key`.
/// }
/// assert!(report.may_have_taken_effect());
/// # }
/// ```
///
/// Observing costs one task-local scope and a `Vec` that grows by one entry
/// per attempt; calls made outside `observe` record nothing. An `observe`
/// inside another passes what it saw on to the enclosing one as well. A spawned task
/// is not observed (tokio does not carry task-locals across `spawn`), except
/// the handler `resilient::tower::IdempotencyLayer` runs on a task of its
/// own, which is part of the request.
pub async fn observe<F: Future>(fut: F) -> (F::Output, Report) {
    // Inside a task linked to another's `observe`, this one's records go
    // there too, as they are made.
    let onward = REPORT
        .try_with(|outer| outer.borrow().forward.clone())
        .ok()
        .flatten();
    let sink = Sink {
        forward: onward,
        ..Sink::default()
    };
    let (output, report) = REPORT
        .scope(RefCell::new(sink), async {
            // Calls inside see that they are observed from their frame, so
            // calls nobody observes never look for a report.
            let frame = Frame::transparent(crate::current_deadline(), true);
            let output = crate::frame::run_in(frame, fut).await;
            let report = REPORT.with(|sink| {
                let mut sink = sink.borrow_mut();
                let mut report = std::mem::take(&mut sink.report);
                if let Some(linked) = sink.linked.take() {
                    report.absorb(&lock(&linked));
                }
                report
            });
            (output, report)
        })
        .await;
    // An enclosing `observe` (a server layer's, say) sees these calls too
    // (not forwarded again: they were, as they were made).
    let _ = REPORT.try_with(|outer| outer.borrow_mut().report.absorb(&report));
    (output, report)
}

/// What the annotated calls inside an [`observe`]d future did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    attempts: Vec<AttemptRecord>,
    gave_up: bool,
}

impl Report {
    /// Adds what `other` saw to this report.
    fn absorb(&mut self, other: &Report) {
        self.attempts.extend_from_slice(&other.attempts);
        self.gave_up |= other.gave_up;
    }

    /// Every attempt of every annotated call made inside, in the order
    /// they ended (a nested call's attempts end before its caller's).
    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.attempts
    }

    /// `true` when some failed attempt may nevertheless have taken effect at
    /// the dependency: it was cut by its timeout, the call's deadline or the
    /// caller (dropped) while it ran, or its error said so
    /// ([`Classify::may_have_taken_effect`](crate::Classify::may_have_taken_effect)).
    /// `false` means every failed attempt certainly did nothing, as far as
    /// the error types tell.
    pub fn may_have_taken_effect(&self) -> bool {
        self.attempts.iter().any(|a| a.may_have_taken_effect)
    }

    /// `true` when an annotated call inside stopped on a failure that its
    /// callers must not retry: its retries, the retry budget or the time
    /// before its deadline were spent, a breaker, bulkhead or load shedder
    /// refused it, or its dependency's answer said not to retry
    /// ([`Classification::DoNotRetry`](crate::Classification::DoNotRetry)). A server uses it to tell its own caller not to
    /// retry either (one retrying layer across services).
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// Retries made (attempts after each call's first).
    pub fn retries(&self) -> u32 {
        let retries = self.attempts.iter().filter(|a| a.attempt > 1).count();
        u32::try_from(retries).unwrap_or(u32::MAX)
    }
}

/// One attempt of an annotated call, as [`Report`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The annotated function, as `module::path::name`.
    pub function: &'static str,
    /// The attempt's number within its call, from 1.
    pub attempt: u32,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The attempt failed in a way that may have taken effect.
    pub may_have_taken_effect: bool,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The body returned `Ok`.
    Succeeded,
    /// The body returned an error, so classified.
    Failed(Classification),
    /// The attempt's timeout or the call's deadline cut it while it ran.
    TimedOut,
    /// Refused before it ran (breaker open, bulkhead full, load shed, a
    /// deadline already passed).
    Refused(ErrorKind),
    /// Dropped while it ran, by the caller (its own timeout, a `select!`
    /// that chose another branch): it may have reached the dependency.
    Cancelled,
}

/// Records one attempt, when a report is being made.
pub(crate) fn record(
    function: &'static str,
    attempt: u32,
    outcome: AttemptOutcome,
    may_have_taken_effect: bool,
) {
    let _ = REPORT.try_with(|r| {
        r.borrow_mut().push(AttemptRecord {
            function,
            attempt,
            outcome,
            may_have_taken_effect,
        });
    });
}

/// Records that a call gave up, when a report is being made.
pub(crate) fn record_give_up() {
    let _ = REPORT.try_with(|r| r.borrow_mut().give_up());
}
