//! The named parts a call goes through (breaker, adaptive throttle, bulkhead,
//! retry budget), resolved from the registry. Stub until the parts land.

use tokio::time::Instant;

use crate::Error;
use crate::outcome::Outcome;

/// The parts one call site uses.
#[derive(Debug, Default)]
pub(crate) struct Deps {}

/// What one admitted attempt holds until it finishes.
#[derive(Debug)]
pub(crate) struct Admission<'a> {
    _deps: &'a Deps,
}

impl Deps {
    pub(crate) async fn admit(
        &self,
        _now: Instant,
        _deadline: Option<Instant>,
    ) -> Result<Admission<'_>, Error> {
        Ok(Admission { _deps: self })
    }

    pub(crate) fn on_request(&self, _now: Instant) {}

    pub(crate) fn try_retry(&self, _now: Instant) -> bool {
        true
    }
}

impl Admission<'_> {
    pub(crate) fn finish(self, _outcome: Outcome, _end: Instant) {}
}
