// A return type that is not a `Result`, on functions with retries, a
// breaker, arguments and a fallback: one error each, at the return type,
// also in a real `cargo check` (rustc used to report it again at the
// engine's `.await`, which trybuild does not show), and none from the
// fallback's error parameter.

use resilient::resilient;

#[resilient(retries = 2, idempotent, breaker = "counts")]
async fn count(n: u32) -> Option<u32> {
    Some(n)
}

#[resilient(retries = 1, idempotent, fallback = none)]
async fn with_fallback(n: u32) -> Option<u32> {
    Some(n)
}

async fn none(_: u32, _error: ()) -> Option<u32> {
    None
}

fn main() {}
