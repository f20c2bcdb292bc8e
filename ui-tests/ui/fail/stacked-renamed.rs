// One attribute per function, also when it is imported under another name
// (review 44: two `#[retry(…)]` compiled, and the outer layer's retries
// multiplied the inner one's).

use resilient::resilient as retry;

#[retry(retries = 2, idempotent)]
#[retry(deadline_ms = 100)]
async fn twice() -> Result<(), std::io::Error> {
    Ok(())
}

// Under two names.
#[resilient::resilient(retries = 2, idempotent)]
#[retry(deadline_ms = 100)]
async fn mixed() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
