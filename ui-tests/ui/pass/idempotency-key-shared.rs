// `retries` without `idempotent` on functions that take the key behind a
// pointer: every attempt's copy of an `Arc`, `Box` or reference is the
// same key.

use std::sync::Arc;

use resilient::{IdempotencyKey, resilient};

#[resilient(retries = 3)]
async fn charge(key: Arc<IdempotencyKey>, cents: u64) -> Result<String, std::io::Error> {
    Ok(format!("{key}: {cents}"))
}

#[resilient(retries = 3)]
async fn refund(key: &Box<IdempotencyKey>, cents: u64) -> Result<String, std::io::Error> {
    Ok(format!("{key}: {cents}"))
}

#[resilient(retries = 3)]
async fn capture(key: &&IdempotencyKey, cents: u64) -> Result<String, std::io::Error> {
    Ok(format!("{key}: {cents}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let key = IdempotencyKey::from_stable_id("order-1").unwrap();
    assert_eq!(
        charge(Arc::new(key.clone()), 250).await.unwrap(),
        "order-1: 250"
    );
    assert_eq!(
        refund(&Box::new(key.clone()), 250).await.unwrap(),
        "order-1: 250"
    );
    assert_eq!(capture(&&key, 250).await.unwrap(), "order-1: 250");
}
