// An argument the body does not use, named `_name` as the user would without
// the attribute: no warning, with or without retries.
#![deny(warnings)]

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
async fn retried(_unused: u32, used: u32) -> Result<u32, std::io::Error> {
    Ok(used)
}

#[resilient(deadline_ms = 100)]
async fn once(_unused: u32, used: u32) -> Result<u32, std::io::Error> {
    Ok(used)
}

#[resilient(retries = 2, idempotent)]
async fn wildcard(_: u32, used: u32) -> Result<u32, std::io::Error> {
    Ok(used)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(retried(0, 1).await.unwrap(), 1);
    assert_eq!(once(0, 1).await.unwrap(), 1);
    assert_eq!(wildcard(0, 1).await.unwrap(), 1);
}
