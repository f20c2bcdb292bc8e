// `retries = 0` with `idempotent` and a backoff: one error, on
// `retries = 0`, not a second one telling to add the `retries` written.

use resilient::resilient;

#[resilient(retries = 0, idempotent, base_ms = 10)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
