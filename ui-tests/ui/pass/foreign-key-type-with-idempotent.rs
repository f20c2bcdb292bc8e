// A function marked `idempotent` needs no idempotency key: one that takes
// another library's type named `IdempotencyKey` (a payment SDK's) compiles.
// Review 21: it was refused, "`&stripe::IdempotencyKey` is not `resilient::IdempotencyKey`".
use resilient::resilient;

mod stripe {
    #[derive(Clone, Debug)]
    pub struct IdempotencyKey(pub String);
}

#[resilient(retries = 2, idempotent)]
async fn fetch(key: &stripe::IdempotencyKey) -> Result<usize, std::io::Error> {
    Ok(key.0.len())
}

// Nor does a function without retries (review 29: one taking the key in
// an `Arc` was refused once keys behind pointers were recognised).
#[resilient(deadline_ms = 500)]
async fn send(key: std::sync::Arc<stripe::IdempotencyKey>) -> Result<usize, std::io::Error> {
    Ok(key.0.len())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let key = stripe::IdempotencyKey("k".into());
    assert_eq!(fetch(&key).await.unwrap(), 1);
    assert_eq!(send(std::sync::Arc::new(key)).await.unwrap(), 1);
}
