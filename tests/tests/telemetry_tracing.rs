//! The `tracing` span and events of annotated calls, captured by a test
//! subscriber: the span's fields, the body's events inside it, one event per
//! failed attempt with its error, classification, delay and why, the give-up
//! and fallback warnings, and silence on success.

#[path = "support/interest.rs"]
mod interest;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::{Classification, Classify, Registry, State, resilient};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, filter::LevelFilter};

// ----- a subscriber that keeps everything ------------------------------------

#[derive(Debug, Clone)]
struct SpanRec {
    id: u64,
    name: &'static str,
    fields: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct EventRec {
    level: Level,
    target: String,
    fields: BTreeMap<String, String>,
    /// The names of the spans the event is in, outermost first.
    scope: Vec<&'static str>,
    /// The innermost span's id.
    span: Option<u64>,
}

impl EventRec {
    fn message(&self) -> &str {
        self.fields.get("message").map_or("", String::as_str)
    }
    fn field(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .unwrap_or_else(|| panic!("event {self:?} has no field `{name}`"))
    }
}

#[derive(Clone, Default)]
struct Captured {
    spans: Arc<Mutex<Vec<SpanRec>>>,
    events: Arc<Mutex<Vec<EventRec>>>,
}

impl Captured {
    fn spans(&self) -> Vec<SpanRec> {
        self.spans.lock().unwrap().clone()
    }
    fn events(&self) -> Vec<EventRec> {
        self.events.lock().unwrap().clone()
    }
    fn resilient_events(&self) -> Vec<EventRec> {
        self.events()
            .into_iter()
            .filter(|e| e.target == "resilient")
            .collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Captured {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.spans.lock().unwrap().push(SpanRec {
            id: id.into_u64(),
            name: attrs.metadata().name(),
            fields,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some(span) = spans.iter_mut().rev().find(|s| s.id == id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let (scope, span) = match ctx.event_scope(event) {
            Some(scope) => {
                let spans: Vec<_> = scope.from_root().collect();
                (
                    spans.iter().map(|s| s.name()).collect(),
                    spans.last().map(|s| s.id().into_u64()),
                )
            }
            None => (Vec::new(), None),
        };
        self.events.lock().unwrap().push(EventRec {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields,
            scope,
            span,
        });
    }
}

/// Captures what the current thread traces until the guard is dropped.
fn capture(max: LevelFilter) -> (Captured, tracing::subscriber::DefaultGuard) {
    // Every test here sets its subscriber before its calls, on their
    // thread; this also closes the narrow window of a callsite registered
    // while another test installs its subscriber (see the module).
    interest::keep();
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone().with_filter(max));
    let guard = tracing::subscriber::set_default(subscriber);
    (captured, guard)
}

// ----- the functions ---------------------------------------------------------

#[derive(Debug)]
enum E {
    Unavailable,
    RateLimited(u64),
    Declined,
    Refused(resilient::Error),
}

impl fmt::Display for E {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            E::Unavailable => f.write_str("503 from the payments API"),
            E::RateLimited(s) => write!(f, "429, retry after {s}s"),
            E::Declined => f.write_str("card declined"),
            E::Refused(e) => e.fmt(f),
        }
    }
}

impl From<resilient::Error> for E {
    fn from(e: resilient::Error) -> Self {
        E::Refused(e)
    }
}

impl Classify for E {
    fn classify(&self) -> Classification {
        match self {
            E::Unavailable => Classification::Transient,
            E::RateLimited(s) => Classification::Throttled {
                retry_after: Some(Duration::from_secs(*s)),
            },
            E::Declined => Classification::Permanent,
            E::Refused(e) => e.classify(),
        }
    }
}

/// Fails with `error` while `fails` is above zero, counting it down.
fn fail_while(fails: &AtomicU32, error: fn() -> E) -> Result<u32, E> {
    if fails
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        Err(error())
    } else {
        Ok(7)
    }
}

#[resilient(
    retries = 2,
    idempotent,
    deadline_ms = 10_000,
    breaker = "tracing-payments",
    backoff = "exponential",
    base_ms = 100,
    cap_ms = 100
)]
async fn charge(fails: &AtomicU32) -> Result<u32, E> {
    tracing::info!(target: "app", "calling the payments API");
    fail_while(fails, || E::Unavailable)
}

#[resilient(
    retries = 2,
    idempotent,
    backoff = "exponential",
    base_ms = 100,
    cap_ms = 100
)]
async fn throttled(fails: &AtomicU32) -> Result<u32, E> {
    fail_while(fails, || E::RateLimited(2))
}

#[resilient(retries = 1, idempotent, breaker = "tracing-declines")]
async fn declined() -> Result<u32, E> {
    Err(E::Declined)
}

#[resilient(breaker = "tracing-open")]
async fn behind_open_breaker() -> Result<u32, E> {
    Ok(1)
}

async fn degraded(_fails: &AtomicU32, _error: E) -> Result<u32, E> {
    Ok(0)
}

async fn served_stale(_error: E) -> Result<u32, E> {
    Ok(0)
}

#[resilient(breaker = "tracing-fallback", bulkhead = "tracing-fallback", fallback = served_stale)]
async fn open_with_fallback() -> Result<u32, E> {
    Ok(1)
}

#[resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1, fallback = degraded)]
async fn with_fallback(fails: &AtomicU32) -> Result<u32, E> {
    fail_while(fails, || E::Unavailable)
}

fn scoped() -> Registry {
    Registry::builder().build().unwrap()
}

// ----- the tests ---------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_failed_then_retried_call_is_one_span_with_one_event_per_failed_attempt() {
    let (captured, _guard) = capture(LevelFilter::TRACE);
    let fails = AtomicU32::new(1);
    let result = scoped().scope(charge(&fails)).await;
    assert_eq!(result.unwrap(), 7);

    let spans: Vec<_> = captured
        .spans()
        .into_iter()
        .filter(|s| s.name == "resilient")
        .collect();
    assert_eq!(spans.len(), 1, "one span per call: {spans:?}");
    let span = &spans[0];
    assert_eq!(span.fields["function"], "telemetry_tracing::charge");
    assert_eq!(span.fields["breaker"], "tracing-payments");
    assert_eq!(span.fields["deadline_ms"], "10000");
    assert!(!span.fields.contains_key("bulkhead"), "{span:?}");

    // The body's own events are inside the call's span, both attempts.
    let body: Vec<_> = captured
        .events()
        .into_iter()
        .filter(|e| e.target == "app")
        .collect();
    assert_eq!(body.len(), 2);
    for e in &body {
        assert_eq!(e.span, Some(span.id), "{e:?}");
        assert_eq!(e.scope, ["resilient"]);
    }

    let ours = captured.resilient_events();
    assert_eq!(
        ours.len(),
        1,
        "one event per failed attempt, none on success: {ours:?}"
    );
    let retrying = &ours[0];
    assert_eq!(retrying.level, Level::DEBUG);
    assert_eq!(retrying.message(), "attempt failed; retrying");
    assert_eq!(retrying.span, Some(span.id));
    assert_eq!(retrying.field("attempt"), "1");
    assert_eq!(retrying.field("class"), "transient");
    assert_eq!(retrying.field("delay_ms"), "100");
    assert_eq!(retrying.field("delay_from"), "backoff");
    assert_eq!(retrying.field("deadline_left_ms"), "10000");
    assert_eq!(retrying.field("function"), "telemetry_tracing::charge");
    // `E` is `Display`, and the expansion tells the engine so: the event
    // shows the error as its `Display` says.
    assert_eq!(retrying.field("error"), "503 from the payments API");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_longer_than_the_backoff_is_named_as_the_delay() {
    let (captured, _guard) = capture(LevelFilter::TRACE);
    let fails = AtomicU32::new(1);
    assert_eq!(throttled(&fails).await.unwrap(), 7);
    let ours = captured.resilient_events();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].field("class"), "throttled");
    assert_eq!(ours[0].field("delay_ms"), "2000");
    assert_eq!(ours[0].field("delay_from"), "retry-after");
    // No deadline: the field is left out.
    assert!(!ours[0].fields.contains_key("deadline_left_ms"));
}

#[tokio::test(start_paused = true)]
async fn giving_up_after_the_retries_is_a_warning_that_says_why() {
    let (captured, _guard) = capture(LevelFilter::TRACE);
    let fails = AtomicU32::new(10);
    let result = scoped().scope(charge(&fails)).await;
    assert!(matches!(result, Err(E::Unavailable)));
    let ours = captured.resilient_events();
    let levels: Vec<_> = ours.iter().map(|e| (e.level, e.message())).collect();
    assert_eq!(
        levels,
        [
            (Level::DEBUG, "attempt failed; retrying"),
            (Level::DEBUG, "attempt failed; retrying"),
            (Level::WARN, "call failed; giving up"),
        ]
    );
    let gave_up = &ours[2];
    assert_eq!(gave_up.field("attempt"), "3");
    assert_eq!(gave_up.field("why"), "retries spent");
    assert_eq!(gave_up.field("class"), "transient");
    assert_eq!(gave_up.scope, ["resilient"]);
    // The deadline left shrinks by the sleeps: 10 s, then 10 s - 100 ms.
    assert_eq!(ours[0].field("deadline_left_ms"), "10000");
    assert_eq!(ours[1].field("deadline_left_ms"), "9900");
}

/// The dependency said not to retry: the call gives up (review 9: it was
/// logged as a DEBUG "not retried here", though `observe` reported a
/// give-up and the server's answer said so).
#[derive(Debug)]
struct SaidNo;

impl From<resilient::Error> for SaidNo {
    fn from(_: resilient::Error) -> Self {
        SaidNo
    }
}

impl Classify for SaidNo {
    fn classify(&self) -> Classification {
        Classification::DoNotRetry { retry_after: None }
    }
}

#[resilient(retries = 2, idempotent)]
async fn told_not_to_retry() -> Result<u32, SaidNo> {
    Err(SaidNo)
}

#[tokio::test(start_paused = true)]
async fn a_do_not_retry_answer_is_a_give_up_warning() {
    let (captured, _guard) = capture(LevelFilter::TRACE);
    let (result, report) = resilient::observe(told_not_to_retry()).await;
    assert!(result.is_err());
    assert!(report.gave_up());
    let ours = captured.resilient_events();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(
        (ours[0].level, ours[0].message()),
        (Level::WARN, "call failed; giving up")
    );
    assert_eq!(
        ours[0].field("why"),
        "the dependency failed and is not to be retried"
    );
    assert_eq!(ours[0].field("class"), "do_not_retry");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_debug_and_not_retried() {
    let (captured, _guard) = capture(LevelFilter::TRACE);
    assert!(matches!(scoped().scope(declined()).await, Err(E::Declined)));
    let ours = captured.resilient_events();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].level, Level::DEBUG);
    assert_eq!(ours[0].field("class"), "permanent");
    assert_eq!(ours[0].field("why"), "not retryable");
}

#[tokio::test(start_paused = true)]
async fn a_refusal_by_an_open_breaker_is_debug_and_names_the_breaker() {
    let registry = scoped();
    let (captured, _guard) = capture(LevelFilter::TRACE);
    // The breaker exists once a call used it; then it is forced open.
    registry.scope(behind_open_breaker()).await.unwrap();
    registry
        .breaker("tracing-open")
        .unwrap()
        .transition_to(State::ForcedOpen);
    let result = registry.scope(behind_open_breaker()).await;
    assert!(matches!(result, Err(E::Refused(_))));
    let refused: Vec<_> = captured
        .resilient_events()
        .into_iter()
        .filter(|e| e.fields.get("why").map(String::as_str) == Some("refused"))
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", captured.resilient_events());
    assert_eq!(refused[0].level, Level::DEBUG);
    assert_eq!(refused[0].field("class"), "refused");
    assert_eq!(
        refused[0].field("error"),
        "circuit breaker `tracing-open` is open"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fallback_answering_is_a_warning() {
    let (captured, _guard) = capture(LevelFilter::TRACE);
    let fails = AtomicU32::new(10);
    assert_eq!(with_fallback(&fails).await.unwrap(), 0);
    let warnings: Vec<_> = captured
        .resilient_events()
        .into_iter()
        .filter(|e| e.level == Level::WARN)
        .collect();
    let messages: Vec<_> = warnings.iter().map(EventRec::message).collect();
    assert_eq!(
        messages,
        [
            "call failed; giving up",
            "call failed; its fallback answers"
        ]
    );
    assert_eq!(
        warnings[1].field("function"),
        "telemetry_tracing::with_fallback"
    );
}

/// The fallback answers after the call's span has closed: its warning
/// names the call's breaker and bulkhead, as the span did.
#[tokio::test(start_paused = true)]
async fn a_fallback_warning_names_the_calls_parts() {
    let registry = scoped();
    let (captured, _guard) = capture(LevelFilter::TRACE);
    assert_eq!(registry.scope(open_with_fallback()).await.unwrap(), 1);
    registry
        .breaker("tracing-fallback")
        .unwrap()
        .transition_to(State::ForcedOpen);
    assert_eq!(registry.scope(open_with_fallback()).await.unwrap(), 0);
    let warnings: Vec<_> = captured
        .resilient_events()
        .into_iter()
        .filter(|e| e.level == Level::WARN)
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].message(), "call failed; its fallback answers");
    assert_eq!(warnings[0].field("breaker"), "tracing-fallback");
    assert_eq!(warnings[0].field("bulkhead"), "tracing-fallback");
    assert!(!warnings[0].fields.contains_key("budget"), "{warnings:?}");
}

#[tokio::test(start_paused = true)]
async fn a_successful_call_logs_nothing_at_any_level() {
    let (captured, _guard) = capture(LevelFilter::TRACE);
    let fails = AtomicU32::new(0);
    assert_eq!(scoped().scope(charge(&fails)).await.unwrap(), 7);
    assert_eq!(captured.resilient_events().len(), 0);
    assert_eq!(captured.spans().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn at_warn_the_span_and_the_retry_events_are_filtered_out() {
    let (captured, _guard) = capture(LevelFilter::WARN);
    let fails = AtomicU32::new(1);
    assert_eq!(scoped().scope(charge(&fails)).await.unwrap(), 7);
    assert!(captured.spans().is_empty());
    assert!(captured.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn nested_calls_nest_their_spans() {
    #[resilient(retries = 1, idempotent, deadline_ms = 5_000)]
    async fn outer(fails: &AtomicU32) -> Result<u32, E> {
        inner(fails).await
    }
    #[resilient(timeout_ms = 1_000)]
    async fn inner(fails: &AtomicU32) -> Result<u32, E> {
        tracing::info!(target: "app", "inner body");
        fail_while(fails, || E::Unavailable)
    }
    let (captured, _guard) = capture(LevelFilter::TRACE);
    let fails = AtomicU32::new(0);
    assert_eq!(outer(&fails).await.unwrap(), 7);
    let spans = captured.spans();
    assert_eq!(spans.len(), 2);
    // The inner call inherits the outer deadline: 5 s left at its entry.
    assert_eq!(spans[1].fields["function"], "telemetry_tracing::inner");
    assert_eq!(spans[1].fields["deadline_ms"], "5000");
    let body = captured
        .events()
        .into_iter()
        .find(|e| e.target == "app")
        .unwrap();
    assert_eq!(body.scope, ["resilient", "resilient"]);
}

// ----- the error's `Display`, where the call site knows it ---------------------

#[test]
// The borrow is the expansion's form: it is what makes the fallback apply.
#[allow(clippy::needless_borrow)]
fn display_probe_finds_display_and_falls_back_to_the_type_name() {
    #[allow(unused_imports)]
    use resilient::__private::{DisplayProbe, ViaDisplay, ViaTypeName};
    struct NotDisplay;
    let shown = (&DisplayProbe::<E>::new()).__resilient_describer();
    let show = shown.expect("`E` is `Display`");
    assert_eq!(show(&E::Declined).to_string(), "card declined");
    let none = (&DisplayProbe::<NotDisplay>::new()).__resilient_describer();
    assert!(none.is_none());
    // As the expansion would name the type: through the return type.
    type Ret = Result<u32, E>;
    type RetNot = Result<u32, NotDisplay>;
    use resilient::__private::ReturnsResult;
    let shown = (&DisplayProbe::<<Ret as ReturnsResult>::Error>::new()).__resilient_describer();
    assert!(shown.is_some());
    let none = (&DisplayProbe::<<RetNot as ReturnsResult>::Error>::new()).__resilient_describer();
    assert!(none.is_none());
}

#[tokio::test(start_paused = true)]
async fn display_of_the_error_when_the_call_site_knows_it() {
    use resilient::__private::{Policy, ViaDisplay, classify_by_trait, refusal_into, retry_lean};
    static POLICY: Policy =
        Policy::new("tests::described")
            .retries(1)
            .backoff(resilient::Backoff::exponential(
                Duration::from_millis(5),
                Duration::from_millis(5),
            ));
    let (captured, _guard) = capture(LevelFilter::TRACE);
    let fails = AtomicU32::new(10);
    let describe = resilient::__private::DisplayProbe::<E>::new().__resilient_describer();
    let result: Result<u32, E> = retry_lean(
        &POLICY,
        classify_by_trait,
        refusal_into::<Result<u32, E>>(),
        describe,
        || async { fail_while(&fails, || E::Unavailable) },
    )
    .await;
    assert!(result.is_err());
    let ours = captured.resilient_events();
    assert_eq!(ours.len(), 2);
    assert_eq!(ours[0].field("error"), "503 from the payments API");
    assert_eq!(ours[1].field("error"), "503 from the payments API");
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opening_is_logged_inside_the_call_that_opened_it() {
    #[resilient(breaker = "tracing-opens")]
    async fn fails() -> Result<u32, E> {
        Err(E::Unavailable)
    }
    let registry = Registry::builder()
        .breaker(
            "tracing-opens",
            resilient::BreakerConfig::default()
                .sliding_window(resilient::SlidingWindow::CountBased { size: 2 })
                .minimum_number_of_calls(2),
        )
        .build()
        .unwrap();
    let (captured, _guard) = capture(LevelFilter::TRACE);
    for _ in 0..2 {
        let _ = registry.scope(fails()).await;
    }
    assert_eq!(
        registry.breaker("tracing-opens").unwrap().state(),
        State::Open
    );
    let spans: Vec<_> = captured.spans().into_iter().map(|s| s.id).collect();
    let transitions: Vec<_> = captured
        .events()
        .into_iter()
        .filter(|e| e.target.starts_with("resilient::breaker"))
        .collect();
    assert!(!transitions.is_empty(), "{:?}", captured.events());
    for t in &transitions {
        assert_eq!(t.scope, ["resilient"], "{t:?}");
        // The second call's span: its failure opened the breaker.
        assert_eq!(t.span, Some(spans[1]), "{t:?}");
    }
}

// ----- a panicking layer and the retry budget a fallback call holds ----------

/// Fails every call after 10 ms; counts calls.
#[derive(Default)]
struct Down(AtomicU32);

impl Down {
    async fn call(&self) -> Result<u32, E> {
        self.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        Err(E::Unavailable)
    }
}

async fn pass_the_error_on(_dep: &Down, error: E) -> Result<u32, E> {
    Err(error)
}

#[resilient(budget = "spent", fallback = pass_the_error_on)]
async fn on_a_spent_budget_passing_the_error_on(dep: &Down) -> Result<u32, E> {
    dep.call().await
}

#[resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1)]
async fn a_request_whose_telemetry_panics(dep: &Down) -> Result<u32, E> {
    on_a_spent_budget_passing_the_error_on(dep).await
}

#[resilient(budget = "roomy")]
async fn on_a_roomy_budget(dep: &Down) -> Result<u32, E> {
    dep.call().await
}

#[resilient(bulkhead = "missing", fallback = pass_the_error_on)]
async fn refused_at_its_start(_dep: &Down) -> Result<u32, E> {
    Ok(1)
}

#[resilient(retries = 3, idempotent, base_ms = 1, cap_ms = 1)]
async fn a_later_request(failing: &Down, unused: &Down) -> Result<u32, E> {
    let result = on_a_roomy_budget(failing).await;
    let _ = refused_at_its_start(unused).await;
    result
}

/// A layer that panics when the first span closes.
struct PanicsOnFirstClose(std::sync::atomic::AtomicBool);

impl<S: Subscriber> tracing_subscriber::Layer<S> for PanicsOnFirstClose {
    fn on_close(&self, _: Id, _: Context<'_, S>) {
        if !self.0.swap(true, Ordering::SeqCst) {
            panic!("a tracing layer panics");
        }
    }
}

/// From a review of the fallback's budget hand-over: the engine holds a
/// failed call's retry budget until the expansion hands it to the
/// fallback, and user code runs in between (here a tracing layer, as the
/// call's span closes). A panic there left the budget held, and a later
/// call refused at its start (its fallback passing the refusal on)
/// reported it as its own failure's: an unrelated request's retry asked
/// the panicked request's spent budget, and was refused.
#[test]
fn a_budget_held_for_a_fallback_does_not_outlive_a_panicking_layer() {
    let layer = PanicsOnFirstClose(std::sync::atomic::AtomicBool::new(false));
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let registry = Registry::builder()
        .strict(true)
        .budget(
            "spent",
            resilient::BudgetConfig::ratio(0.0001).min_retries_per_second(0),
        )
        .budget("roomy", resilient::BudgetConfig::default())
        .build()
        .unwrap();
    runtime.block_on(async {
        let first = Arc::new(Down::default());
        let panicked = tokio::spawn(registry.clone().scope({
            let first = Arc::clone(&first);
            async move { a_request_whose_telemetry_panics(&first).await }
        }))
        .await;
        assert!(
            panicked.is_err_and(|e| e.is_panic()),
            "the layer did not panic"
        );
        let failing = Arc::new(Down::default());
        let unused = Arc::new(Down::default());
        let later = tokio::spawn(registry.clone().scope({
            let (failing, unused) = (Arc::clone(&failing), Arc::clone(&unused));
            async move { a_later_request(&failing, &unused).await }
        }))
        .await
        .unwrap();
        assert!(later.is_err());
        assert_eq!(
            failing.0.load(Ordering::SeqCst),
            4,
            "the later request's retry asked the panicked request's budget"
        );
    });
}
