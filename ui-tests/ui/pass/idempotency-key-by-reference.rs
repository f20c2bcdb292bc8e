// `retries` without `idempotent` on a function that takes a
// `&resilient::IdempotencyKey`.

use resilient::{IdempotencyKey, resilient};

#[resilient(retries = 3)]
async fn charge(key: &IdempotencyKey, cents: u64) -> Result<String, std::io::Error> {
    Ok(format!("{key}: {cents}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let key = IdempotencyKey::from_stable_id("order-1").unwrap();
    assert_eq!(charge(&key, 250).await.unwrap(), "order-1: 250");
}
