// An error type that borrows, with `Classify` for `'static` only: the
// expansion's lookup of `Classify` (for a function without retries, which
// classifies what it reports when it can, and for one that names
// `classify = path`, which still asks the error whether a failure may have
// taken effect) takes that impl for `StaticOnly<'a>`, as Rust's method
// lookup ignores lifetimes. The fix, as the attribute's docs say:
// implement it for every lifetime (ui/pass/error-type-probes.rs).
use resilient::{Classification, Classify, resilient};

#[derive(Debug)]
pub enum StaticOnly<'a> {
    Bad(&'a str),
    Resilience(resilient::Error),
}

impl From<resilient::Error> for StaticOnly<'_> {
    fn from(e: resilient::Error) -> Self {
        StaticOnly::Resilience(e)
    }
}

impl Classify for StaticOnly<'static> {
    fn classify(&self) -> Classification {
        Classification::Permanent
    }
}

#[resilient(deadline_ms = 100)]
async fn static_only<'a>(text: &'a str) -> Result<u32, StaticOnly<'a>> {
    text.parse().map_err(|_| StaticOnly::Bad(text))
}

fn permanent(_: &StaticOnly<'_>) -> Classification {
    Classification::Permanent
}

#[resilient(retries = 1, idempotent, classify = permanent)]
async fn named_classifier<'a>(text: &'a str) -> Result<u32, StaticOnly<'a>> {
    text.parse().map_err(|_| StaticOnly::Bad(text))
}

fn main() {}
