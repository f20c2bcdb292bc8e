// The key parameter may name the type by its full path.

use resilient::resilient;

#[resilient(retries = 3)]
async fn charge(key: ::resilient::IdempotencyKey) -> Result<String, std::io::Error> {
    Ok(key.to_string())
}

#[resilient(retries = 3)]
async fn refund(key: &resilient::IdempotencyKey) -> Result<String, std::io::Error> {
    Ok(key.to_string())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let key = resilient::IdempotencyKey::random();
    assert_eq!(charge(key.clone()).await.unwrap(), key.to_string());
    assert_eq!(refund(&key).await.unwrap(), key.to_string());
}
