// An idempotency key bound to `_`: the body cannot send it, so the server
// could not tell a retry from a new operation.

use resilient::{IdempotencyKey, resilient};

#[resilient(retries = 3)]
async fn charge(_: &IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

// In parentheses too.
#[resilient(retries = 3)]
async fn refund((_): IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

fn main() {}
