// A key under a `cfg_attr` that makes a `#[cfg]` may be compiled out as a
// `#[cfg]` one may: refused the same way (review 40: it reached the body,
// and rustc said only that `key` was not found).
#![allow(unexpected_cfgs)]

use resilient::{IdempotencyKey, resilient};

#[resilient(retries = 3)]
async fn charge(
    #[cfg_attr(not(feature = "send-idempotency-keys"), cfg(any()))] key: &IdempotencyKey,
    cents: u64,
) -> Result<u64, std::io::Error> {
    Ok(cents)
}

// Through nested `cfg_attr`s (review 44: refused, but as E0425).
#[resilient(retries = 3)]
async fn refund(
    #[cfg_attr(all(), cfg_attr(not(feature = "send-idempotency-keys"), cfg(any())))]
    key: &IdempotencyKey,
    cents: u64,
) -> Result<u64, std::io::Error> {
    Ok(cents)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _ = charge(500).await;
    let _ = refund(500).await;
    let _ = IdempotencyKey::random();
}
