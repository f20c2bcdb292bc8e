// A key under `#[cfg]` may be compiled out, and the retries would not be:
// with the feature off this non-idempotent function would be retried with no
// key. Refused (review 21: it compiled).
#![allow(unexpected_cfgs)]

use resilient::{IdempotencyKey, resilient};

#[resilient(retries = 3)]
async fn charge(
    #[cfg(feature = "send-idempotency-keys")] key: &IdempotencyKey,
    cents: u64,
) -> Result<u64, std::io::Error> {
    Ok(cents)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Called with no key: the key parameter does not exist.
    let _ = charge(500).await;
    let _ = IdempotencyKey::random();
}
