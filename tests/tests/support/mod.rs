//! Pieces shared by test binaries: each that needs them declares
//! `mod support;`.

use std::fmt;

/// A tracing layer with a bug: it panics on an event whose message
/// contains its string. For tests that the library contains the panic of
/// a subscriber's code run where the library logs.
pub(crate) struct PanicsOn(pub(crate) &'static str);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PanicsOn {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0.contains(self.0) {
            panic!("a tracing layer with a bug");
        }
    }
}
