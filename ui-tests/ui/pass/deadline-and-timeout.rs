// `deadline_ms` and `timeout_ms`, alone and together, with and without retries.

use resilient::resilient;

#[resilient(deadline_ms = 1000)]
async fn with_deadline() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(timeout_ms = 200)]
async fn with_timeout() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(deadline_ms = 1000, timeout_ms = 200, retries = 2, idempotent)]
async fn with_both() -> Result<(), std::io::Error> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    with_deadline().await.unwrap();
    with_timeout().await.unwrap();
    with_both().await.unwrap();
}
