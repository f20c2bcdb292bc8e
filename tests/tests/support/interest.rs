//! Keeps `tracing`'s callsite interest right for a test that sets its own
//! subscriber while other tests of the binary log on threads with none.
//! Test binaries that need it declare
//! `#[path = "support/interest.rs"] mod interest;`.
//!
//! `tracing-core` (0.1.36) caches each callsite's interest. While exactly
//! one dispatcher is registered, a callsite first hit on another thread
//! takes its interest from that thread's default subscriber (none:
//! "never"), not from the registered one, so the test's subscriber never
//! sees that event (`handover_global`'s panicking subscriber missed the
//! breaker's closing in about one run of three). With a second dispatcher
//! registered for the whole process, interest is computed over every
//! registered dispatcher.

use std::sync::LazyLock;

use tracing::Dispatch;

static SECOND: LazyLock<Dispatch> =
    LazyLock::new(|| Dispatch::new(tracing::subscriber::NoSubscriber::default()));

/// Registers the process's second dispatcher (once); call before making
/// the test's subscriber.
pub(crate) fn keep() {
    LazyLock::force(&SECOND);
}
