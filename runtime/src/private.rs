//! What the `#[resilient]` expansion calls. Not a public API: it changes
//! with the macro, which is pinned to this exact crate version.

pub use crate::Backoff;
pub use crate::engine::{Policy, once_lean, once_parts, retry_lean, retry_parts};
pub use crate::telemetry::Describe;

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{Classification, Classify, Error, IdempotencyKey};

// The link-time list of every annotated function's names, which
// `Registry::check_names` reads (see `registry.rs`), and what the
// `__resilient_site!` expansion needs to add to it.
#[cfg(feature = "linkme")]
pub use crate::registry::SITES;
pub use crate::registry::Site;
// The expansion reaches everything through this module (imported once,
// under a local name), the site macro too: a `crate = "…"` naming another
// crate is then one failed import, not an error at each generated path.
pub use crate::__resilient_site;
#[cfg(feature = "linkme")]
pub use linkme;

/// Counts and traces a call answered by its fallback: a caller given a
/// degraded answer, which a dashboard should show. A call with a fallback
/// never reports its give-up to enclosing layers (see `Policy::fallback`),
/// so they judge it by what the fallback returns.
///
/// This traces it (WARN: a caller got a degraded answer); the call is
/// counted once the fallback has answered ([`fallback_ended`]: served, and
/// `outcome="fallback"` with the time from the call's start to the
/// fallback's answer), or as `cancelled` if it is dropped (or panics)
/// before that. The engine counts nothing for a failed call that has a
/// fallback.
///
/// The retry budget the call's failure would report is reported as a
/// sibling's that succeeded (the requests the call sent down); the returned
/// value reports it as a failure's if the fallback returns an error too
/// ([`fallback_ended`]).
pub fn fallback_served(policy: &'static Policy, hold: &FallbackHold) -> FallbackBudget {
    // Taken before anything of the user's (a metrics recorder, a tracing
    // layer) runs, so that a panic there cannot leave it held.
    let budget = crate::frame::take_held_for_fallback();
    // Made before the log line: a tracing layer that panics there leaves
    // the call counted as cancelled when this drops (review 33: counted
    // nowhere).
    let served = FallbackBudget {
        budget,
        policy,
        began: hold.began,
        answered: false,
    };
    // The call's span has closed with the call: the event names its parts
    // as the span did, so that it is found with the call's other events.
    #[cfg(feature = "tracing")]
    {
        let names = policy.names();
        tracing::warn!(
            target: "resilient",
            function = policy.function(),
            breaker = names.breaker,
            budget = names.budget,
            bulkhead = names.bulkhead,
            "call failed; its fallback answers"
        );
    }
    crate::frame::report_budget(served.budget.clone());
    served
}

/// A call its fallback answers, until it has answered: its retry budget,
/// and when it began (for its duration).
#[derive(Debug)]
#[must_use]
pub struct FallbackBudget {
    budget: Option<crate::frame::BudgetRef>,
    policy: &'static Policy,
    began: crate::telemetry::Began,
    answered: bool,
}

/// Dropped before its fallback answered (the caller's timeout, a
/// `select!`, a panicking fallback): the call was cancelled, and no
/// fallback was served.
impl Drop for FallbackBudget {
    fn drop(&mut self) {
        if !self.answered {
            crate::telemetry::call_cancelled(self.policy, &self.began);
        }
    }
}

/// The fallback answered: the call is counted (served, and its metrics
/// with the time from its start); with an error (`failed`), the call
/// failed its caller after all, and an enclosing retry asks its budget
/// (see [`fallback_served`]).
pub fn fallback_ended(mut served: FallbackBudget, failed: bool) {
    served.answered = true;
    crate::Registry::count_fallback_served(served.policy.function());
    crate::telemetry::fallback_answered(served.policy, &served.began);
    if failed {
        crate::frame::report_failed_budget(served.budget.take());
    }
}

/// Finds, where the error type is concrete, how telemetry shows it:
/// `(&__private::DisplayProbe::<E>::new()).__resilient_describer()` is
/// `Some(display)` when `E: Display`, else `None` (autoref
/// specialization: the `Display` impl is on the probe itself, the fallback
/// on a reference to it, so method lookup tries the first one first).
/// The engine itself cannot ask, as it is generic over `E` without a
/// `Display` bound.
pub struct DisplayProbe<E: ?Sized>(std::marker::PhantomData<fn(&E)>);

impl<E: ?Sized> DisplayProbe<E> {
    /// The probe.
    pub const fn new() -> Self {
        DisplayProbe(std::marker::PhantomData)
    }
}

impl<E: ?Sized> Default for DisplayProbe<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: ?Sized> std::fmt::Debug for DisplayProbe<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DisplayProbe")
    }
}

/// Chosen when the error type is `Display`.
pub trait ViaDisplay {
    /// The error type.
    type Error;
    /// Shows the error through its `Display`.
    fn __resilient_describer(&self) -> Describe<Self::Error>;
}

impl<E: std::fmt::Display> ViaDisplay for DisplayProbe<E> {
    type Error = E;
    fn __resilient_describer(&self) -> Describe<E> {
        fn show<E: std::fmt::Display>(error: &E) -> &dyn std::fmt::Display {
            error
        }
        Some(show::<E>)
    }
}

/// Chosen otherwise.
pub trait ViaTypeName {
    /// The error type.
    type Error;
    /// Nothing: telemetry shows the error's type name.
    fn __resilient_describer(&self) -> Describe<Self::Error>;
}

impl<E> ViaTypeName for &DisplayProbe<E> {
    type Error = E;
    fn __resilient_describer(&self) -> Describe<E> {
        None
    }
}

/// The classifier of a function without its own `classify = path`.
pub fn classify_by_trait<E: Classify + ?Sized>(error: &E) -> crate::classify::Verdict {
    crate::classify::Verdict {
        class: error.classify(),
        may_have_taken_effect: error.may_have_taken_effect(),
        is_refusal: error.is_refusal(),
    }
}

/// Checks what a `classify = path` function returns.
#[diagnostic::on_unimplemented(
    message = "a `classify` function must return `resilient::Classification`, not `{Self}`",
    label = "this function returns `{Self}`",
    note = "`classify = path` names a function `fn(&E) -> resilient::Classification`, where `E` is the error type of the annotated function: `Transient` and `Throttled` failures are retried (and counted by a breaker), `DoNotRetry` ones are returned at once but counted by a breaker, `Permanent` ones are returned at once"
)]
pub trait ClassifierOutput {
    /// What the engine learns from it.
    fn into_verdict(self) -> crate::classify::Verdict;
}
impl ClassifierOutput for Classification {
    #[inline]
    fn into_verdict(self) -> crate::classify::Verdict {
        self.into()
    }
}

/// Spanned at the `classify = path` by the expansion, around the call of
/// the user's function.
#[inline]
pub fn classification<C: ClassifierOutput>(classification: C) -> crate::classify::Verdict {
    classification.into_verdict()
}

/// The classifier of a function that neither retries nor keeps statistics
/// and whose error type cannot be classified: each failure counts as
/// permanent and as certainly not applied (nothing else is known of it).
pub fn unclassified<E: ?Sized>(_: &E) -> crate::classify::Verdict {
    Classification::Permanent.into()
}

/// Finds, where the error type is concrete, how a function that neither
/// retries nor keeps statistics classifies its failures (which it needs
/// only for what it reports: to [`observe`](crate::observe), to telemetry):
/// `(&__private::ClassifyProbe::<E>::new()).__resilient_classifier()` is
/// [`classify_by_trait`] when `E: Classify`, else [`unclassified`], by
/// autoref specialization as for [`DisplayProbe`]. Such a function does not
/// require `Classify` of its error type.
pub struct ClassifyProbe<E: ?Sized>(std::marker::PhantomData<fn(&E)>);

impl<E: ?Sized> ClassifyProbe<E> {
    /// The probe.
    pub const fn new() -> Self {
        ClassifyProbe(std::marker::PhantomData)
    }
}

impl<E: ?Sized> Default for ClassifyProbe<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: ?Sized> std::fmt::Debug for ClassifyProbe<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClassifyProbe")
    }
}

/// Chosen when the error type is `Classify`.
pub trait ViaClassify {
    /// The error type.
    type Error;
    /// Classifies by the error's `Classify` impl.
    fn __resilient_classifier(&self) -> fn(&Self::Error) -> crate::classify::Verdict;
    /// What the error's `Classify` impl says beyond its classification.
    fn __resilient_effect(&self) -> fn(&Self::Error) -> Effect;
}

impl<E: Classify> ViaClassify for ClassifyProbe<E> {
    type Error = E;
    fn __resilient_classifier(&self) -> fn(&E) -> crate::classify::Verdict {
        classify_by_trait::<E>
    }
    fn __resilient_effect(&self) -> fn(&E) -> Effect {
        |error| Effect {
            may_have_taken_effect: error.may_have_taken_effect(),
            is_refusal: error.is_refusal(),
        }
    }
}

/// Chosen otherwise.
pub trait ViaUnclassified {
    /// The error type.
    type Error;
    /// Classifies nothing: [`unclassified`].
    fn __resilient_classifier(&self) -> fn(&Self::Error) -> crate::classify::Verdict;
    /// Nothing is known beyond the classification.
    fn __resilient_effect(&self) -> fn(&Self::Error) -> Effect;
}

impl<E> ViaUnclassified for &ClassifyProbe<E> {
    type Error = E;
    fn __resilient_classifier(&self) -> fn(&E) -> crate::classify::Verdict {
        unclassified::<E>
    }
    fn __resilient_effect(&self) -> fn(&E) -> Effect {
        |_| Effect {
            may_have_taken_effect: false,
            is_refusal: None,
        }
    }
}

/// What an error's own [`Classify`] impl says besides its classification,
/// for a function whose `classify = path` classifies it: whether the
/// failure may have taken effect, and whether it is the library's refusal.
/// A `classify` function decides retrying and counting only; the error
/// still knows whether the request went out (an `http::Error` after
/// sending, a 500), which `observe` and the server layers report.
#[derive(Debug, Clone, Copy)]
pub struct Effect {
    may_have_taken_effect: bool,
    is_refusal: Option<bool>,
}

/// A `classify = path` function's classification, with what the error's
/// own `Classify` impl says besides ([`Effect`]).
#[inline]
pub fn with_effect(verdict: crate::classify::Verdict, effect: Effect) -> crate::classify::Verdict {
    crate::classify::Verdict {
        may_have_taken_effect: effect.may_have_taken_effect,
        is_refusal: effect.is_refusal,
        ..verdict
    }
}

/// Checks that an argument can be handed to every attempt.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed to every attempt: it is not `Clone`",
    label = "each retry needs its own copy of this argument",
    note = "`retries` (and `fallback`) run the function again with the same arguments; make `{Self}` `Clone`, pass a reference, or share it through an `Arc`"
)]
pub trait ReusableArgument: Sized {
    /// Each attempt's own copy.
    fn reuse(&self) -> Self;
}
impl<T: Clone> ReusableArgument for T {
    fn reuse(&self) -> Self {
        self.clone()
    }
}

/// Checks the annotated function's return type.
#[diagnostic::on_unimplemented(
    message = "`#[resilient]` functions must return `Result<T, E>`, not `{Self}`",
    label = "not a `Result`",
    note = "a retry, a breaker and a deadline all need to tell failure from success, and to return their own refusals as the error",
    note = "return `Result<T, E>` with an error type `E` that implements `From<resilient::Error>`, such as `Result<{Self}, MyError>`"
)]
pub trait ReturnsResult: Sized {
    /// The success type.
    type Ok;
    /// The error type.
    type Error;
    /// As a `Result`.
    fn into_result(self) -> Result<Self::Ok, Self::Error>;
    /// From a `Result`.
    fn from_result(result: Result<Self::Ok, Self::Error>) -> Self;
    /// Is it an error?
    fn is_failure(&self) -> bool;
}
impl<T, E> ReturnsResult for Result<T, E> {
    type Ok = T;
    type Error = E;
    fn into_result(self) -> Self {
        self
    }
    fn from_result(result: Self) -> Self {
        result
    }
    fn is_failure(&self) -> bool {
        self.is_err()
    }
}

pin_project_lite::pin_project! {
    /// An attempt's future, its output (the function's declared return
    /// type) turned into a `Result` by `into`, a closure the expansion
    /// writes at the return type.
    ///
    /// So the engine is called with a `Result` whatever the function
    /// returns, and the only `ReturnsResult` bound on the declared type is
    /// in code spanned at it: a function that does not return a `Result`
    /// gets one error there. With the declared type as the engine's own
    /// parameter, its bound is checked again wherever the engine's future
    /// is named (at its `.await`), a second error. A closure, not a bounded
    /// generic: a closure's type carries no `where` clause to check again.
    pub struct AsResult<F, C, O> {
        #[pin]
        future: F,
        into: C,
        output: PhantomData<fn() -> O>,
    }
}

/// See [`AsResult`].
pub fn as_result<F, C, O>(future: F, into: C) -> AsResult<F, C, O>
where
    F: Future,
    C: Fn(F::Output) -> O,
{
    AsResult {
        future,
        into,
        output: PhantomData,
    }
}

impl<F, C, O> Future for AsResult<F, C, O>
where
    F: Future,
    C: Fn(F::Output) -> O,
{
    type Output = O;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<O> {
        let this = self.project();
        match this.future.poll(cx) {
            Poll::Ready(output) => Poll::Ready((this.into)(output)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F, C, O> std::fmt::Debug for AsResult<F, C, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AsResult")
    }
}

/// The `Result` the engine runs on for a function declared to return `R`.
pub type ResultOf<R> = Result<<R as ReturnsResult>::Ok, <R as ReturnsResult>::Error>;

/// Checks that the error type can carry the library's refusals.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry `resilient::Error`",
    label = "the error type of this `#[resilient]` function",
    note = "a passed deadline, an attempt timeout or an open breaker reach the caller as this error type, so it needs `From<resilient::Error>`",
    note = "if `{Self}` is defined in your crate, add `impl From<resilient::Error> for {Self}`, e.g. with a variant `Resilience(resilient::Error)`",
    note = "if `{Self}` comes from another crate (`reqwest::Error`, `anyhow::Error`, `std::fmt::Error`, `String`, ...), the orphan rule forbids that impl: return an error type of your own that wraps it, e.g. `enum AppError {{ Failed({Self}), Resilience(resilient::Error) }}` with a `From` impl for each",
    note = "for an HTTP client, `resilient::http::Error` (feature `reqwest`) is ready-made: it carries `reqwest` errors, non-success responses and the library's refusals, and implements `Classify`"
)]
pub trait CarriesRefusals {
    /// The refusal, as this error type.
    fn from_refusal(refusal: Error) -> Self;
}
impl<E: From<Error>> CarriesRefusals for E {
    fn from_refusal(refusal: Error) -> Self {
        E::from(refusal)
    }
}

/// How the engine turns a refusal into the function's error type: the
/// only place the `From<resilient::Error>` bound is checked, spanned at the
/// user's return type by the expansion, so a missing impl is one error.
pub fn refusal_into<R>() -> fn(Error) -> R::Error
where
    R: ReturnsResult,
    R::Error: CarriesRefusals,
{
    <R::Error as CarriesRefusals>::from_refusal
}

/// Checks that a fallback is an `async fn` returning the function's own type.
#[diagnostic::on_unimplemented(
    message = "the fallback must be an `async fn` returning `{R}`, the annotated function's own type",
    label = "this fallback does not return a future of `{R}`",
    note = "a fallback is called as `fallback(arguments…, error).await`, with the annotated function's arguments followed by its final error"
)]
pub trait FallbackFuture<R>: std::future::Future<Output = R> {}
impl<R, F: std::future::Future<Output = R>> FallbackFuture<R> for F {}

/// The call's final error, as handed to the fallback: an identity, spanned
/// at the return type by the expansion. When the return type is no `Result`
/// (reported there, once), its error type is unknown, and must stay so:
/// through this call, the fallback's own error parameter does not become
/// the function's error type, which would be checked for `Classify` and
/// `Display` with errors of its own.
pub fn final_error<R: ReturnsResult>(error: R::Error) -> R::Error {
    error
}

/// A call with a fallback, counted by a graceful shutdown from before the
/// call until its fallback has answered: the engine's own count ends with
/// the engine, and a drain must not find the call finished while its
/// fallback still runs. Taken as the call is (admitted while draining only
/// when nested in work in flight), so the fallback of a call a drain
/// refused is not waited for.
/// It also keeps when the call began: a call its fallback answers is
/// timed to the fallback's answer.
#[derive(Debug)]
pub struct FallbackHold {
    in_flight: Option<crate::shutdown::InFlight>,
    began: crate::telemetry::Began,
}

/// Taken by the expansion before a call with a fallback begins.
pub fn fallback_hold() -> FallbackHold {
    FallbackHold {
        in_flight: crate::shutdown::admit(crate::frame::in_call())
            .ok()
            .flatten(),
        began: crate::telemetry::began(None),
    }
}

/// Spanned at the fallback's path by the expansion. Returns an opaque
/// future, so a fallback that is not one is reported once, here, and not
/// again where the result is awaited. The fallback runs as part of its
/// call: in a frame of work in flight when the call was counted (`held`),
/// so that a draining shutdown admits the calls it makes, as it admits a
/// call's nested calls; what those calls report reaches the caller's frame
/// as if the fallback ran in it.
pub fn fallback<R, F: FallbackFuture<R>>(
    held: &FallbackHold,
    fut: F,
) -> impl std::future::Future<Output = R> {
    let deadline = crate::current_deadline();
    let frame = if held.in_flight.is_some() {
        crate::frame::Frame::admitted(deadline)
    } else {
        crate::frame::Frame::transparent(deadline, false)
    };
    crate::frame::run_in(frame, fut)
}

/// Checks a parameter that claims to be the idempotency key.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `resilient::IdempotencyKey`",
    label = "this parameter is named like an idempotency key",
    note = "only `resilient::IdempotencyKey` (by value, or behind `&`, `Arc`, `Rc` or `Box`) lets a non-`idempotent` function be retried",
    note = "a key type of another library (a provider SDK's) is recognised by its name too: import it under another name (`use sdk::IdempotencyKey as SdkKey;`) if the function also takes `resilient::IdempotencyKey`"
)]
pub trait IsIdempotencyKey {}
impl IsIdempotencyKey for IdempotencyKey {}
impl<T: IsIdempotencyKey + ?Sized> IsIdempotencyKey for &T {}
impl<T: IsIdempotencyKey + ?Sized> IsIdempotencyKey for std::sync::Arc<T> {}
impl<T: IsIdempotencyKey + ?Sized> IsIdempotencyKey for std::rc::Rc<T> {}
impl<T: IsIdempotencyKey + ?Sized> IsIdempotencyKey for Box<T> {}

/// Spanned at the key parameter's type by the expansion.
pub fn idempotency_key<T: IsIdempotencyKey>(_: &T) {}
