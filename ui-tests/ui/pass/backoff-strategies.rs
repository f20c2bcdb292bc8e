// Every backoff strategy, with `base_ms` and `cap_ms`, and the defaults.

use resilient::resilient;

#[resilient(retries = 2, idempotent, backoff = "full_jitter", base_ms = 10, cap_ms = 100)]
async fn full_jitter() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 2, idempotent, backoff = "equal_jitter", base_ms = 10, cap_ms = 100)]
async fn equal_jitter() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 2, idempotent, backoff = "decorrelated_jitter", base_ms = 10, cap_ms = 100)]
async fn decorrelated_jitter() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 2, idempotent, backoff = "exponential", base_ms = 10, cap_ms = 100)]
async fn exponential() -> Result<(), std::io::Error> {
    Ok(())
}

// `base_ms` equal to `cap_ms` is allowed: a constant delay.
#[resilient(retries = 2, idempotent, backoff = "exponential", base_ms = 50, cap_ms = 50)]
async fn constant() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 2, idempotent, base_ms = 10)]
async fn base_only() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 2, idempotent, cap_ms = 1000)]
async fn cap_only() -> Result<(), std::io::Error> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    full_jitter().await.unwrap();
    equal_jitter().await.unwrap();
    decorrelated_jitter().await.unwrap();
    exponential().await.unwrap();
    constant().await.unwrap();
    base_only().await.unwrap();
    cap_only().await.unwrap();
}
