// An idempotency key whose name starts with `_`: Rust's mark for a value
// the body does not use, so it is not sent, and the server could not tell
// a retry from a new operation.

use resilient::{IdempotencyKey, resilient};

#[resilient(retries = 3)]
async fn charge(_key: &IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

// Every name the pattern binds starts with `_`.
#[resilient(retries = 3)]
async fn refund(ref _k @ _: IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

// Underscores only: a name is suggested.
#[resilient(retries = 3)]
async fn void(__: IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

// A key named plainly is accepted, as is `idempotent` with an unused key.
#[resilient(retries = 3)]
async fn capture(key: &IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    let _ = key;
    Ok(cents)
}

#[resilient(retries = 3, idempotent)]
async fn settle(_key: &IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

fn main() {}
