//! A breaker's transitions are logged inside the span of the call that
//! made them: `closed -> open` by the failure that tripped it,
//! `open -> half_open` by the call admitted as the first probe once the
//! wait is over, `half_open -> closed` by the probe's success. On both
//! paths an annotated call takes: the lean one (parts from the global
//! registry, installed once here) and the `async` engine (a registry
//! scoped around the task).

#[path = "support/interest.rs"]
mod interest;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::{
    BreakerConfig, Classification, Classify, Registry, SlidingWindow, State, resilient,
};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug)]
struct E;

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

#[resilient(breaker = "spans-global")]
async fn on_global(fail: bool) -> Result<u32, E> {
    if fail { Err(E) } else { Ok(1) }
}

#[resilient(breaker = "spans-scoped")]
async fn on_scoped(fail: bool) -> Result<u32, E> {
    if fail { Err(E) } else { Ok(1) }
}

/// Opens after two failures in two calls, waits one second, closes after
/// one successful probe.
fn config() -> BreakerConfig {
    BreakerConfig::default()
        .sliding_window(SlidingWindow::CountBased { size: 2 })
        .minimum_number_of_calls(2)
        .wait_duration_in_open_state(Duration::from_secs(1))
        .permitted_number_of_calls_in_half_open_state(1)
}

/// The ids of the `resilient` call spans in the order they were made, and
/// each breaker log line with the id of the span it was logged in.
#[derive(Clone, Default)]
struct Captured {
    calls: Arc<Mutex<Vec<u64>>>,
    transitions: Arc<Mutex<Vec<Logged>>>,
}

/// A transition, `closed -> open`, and the span it was logged in.
type Logged = (String, Option<u64>);

/// A transition's `from` and `to` fields.
#[derive(Default)]
struct FromTo(String, String);

impl tracing::field::Visit for FromTo {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "from" => self.0 = format!("{value:?}"),
            "to" => self.1 = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Captured {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "resilient" {
            self.calls.lock().unwrap().push(id.into_u64());
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if !event.metadata().target().starts_with("resilient::breaker") {
            return;
        }
        let mut t = FromTo::default();
        event.record(&mut t);
        let span = ctx.event_span(event).map(|s| s.id().into_u64());
        self.transitions
            .lock()
            .unwrap()
            .push((format!("{} -> {}", t.0, t.1), span));
    }
}

/// Two failures, a wait, a success: checks each transition was logged in
/// the call that made it (the second, and the third twice).
async fn open_probe_close(call: impl AsyncFn(bool) -> Result<u32, E>, state: impl Fn() -> State) {
    interest::keep();
    let captured = Captured::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(captured.clone()));
    assert!(call(true).await.is_err());
    assert!(call(true).await.is_err());
    assert_eq!(state(), State::Open);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(call(false).await.unwrap(), 1);
    assert_eq!(state(), State::Closed);

    let calls = captured.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "one span per call");
    let transitions = captured.transitions.lock().unwrap().clone();
    let in_call = |k: usize| -> HashSet<&str> {
        transitions
            .iter()
            .filter(|(_, span)| *span == Some(calls[k]))
            .map(|(m, _)| m.as_str())
            .collect()
    };
    let has = |k: usize, what: &str| in_call(k).contains(what);
    assert_eq!(transitions.len(), 3, "{transitions:?}");
    assert!(has(1, "closed -> open"), "{transitions:?}");
    assert!(has(2, "open -> half_open"), "{transitions:?}");
    assert!(has(2, "half_open -> closed"), "{transitions:?}");
}

#[tokio::test(start_paused = true)]
async fn on_the_lean_path_each_transition_is_logged_in_the_call_that_made_it() {
    Registry::builder()
        .breaker("spans-global", config())
        .build()
        .unwrap()
        .install()
        .unwrap();
    let breaker = Registry::global().breaker("spans-global").unwrap();
    open_probe_close(on_global, || breaker.state()).await;
}

#[tokio::test(start_paused = true)]
async fn in_the_async_engine_each_transition_is_logged_in_the_call_that_made_it() {
    let registry = Registry::builder()
        .breaker("spans-scoped", config())
        .build()
        .unwrap();
    let breaker = registry.breaker("spans-scoped").unwrap();
    open_probe_close(
        async |fail| registry.scope(on_scoped(fail)).await,
        || breaker.state(),
    )
    .await;
}
