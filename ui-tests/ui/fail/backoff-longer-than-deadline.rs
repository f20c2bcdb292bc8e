// A backoff whose first delay is never shorter than the deadline: no retry
// could start before it, so `retries` would never act (review 44: it
// compiled, and every call made one attempt).

use resilient::resilient;

#[resilient(retries = 3, idempotent, backoff = "exponential", base_ms = 100, deadline_ms = 50)]
async fn fixed() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 3, idempotent, backoff = "equal_jitter", base_ms = 400, deadline_ms = 200)]
async fn half_of_base() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 3, idempotent, backoff = "decorrelated_jitter", deadline_ms = 100)]
async fn default_base() -> Result<(), std::io::Error> {
    Ok(())
}

// Full jitter may wait any time from 0: accepted.
#[resilient(retries = 3, idempotent, base_ms = 100, deadline_ms = 50)]
async fn full_jitter() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {
    let _ = (fixed(), half_of_base(), default_base(), full_jitter());
}
