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

// Behind a reference pattern, or matched without a binding.
#[resilient(retries = 3)]
async fn capture(&_: &IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

#[resilient(retries = 3)]
async fn settle(IdempotencyKey { .. }: IdempotencyKey, cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

fn main() {}
