// Returning an error of another type from the body is reported as rustc
// reports it without the attribute: a plain E0308 at the user's expression,
// not at the return type naming an `{async block}` and the engine.

use resilient::{Classification, Classify, resilient};

#[derive(Debug)]
enum PayError {
    Resilience(resilient::Error),
}

impl From<resilient::Error> for PayError {
    fn from(e: resilient::Error) -> Self {
        PayError::Resilience(e)
    }
}

impl Classify for PayError {
    fn classify(&self) -> Classification {
        Classification::Transient
    }
}

#[resilient(retries = 3, idempotent)]
async fn charge(amount: u64) -> Result<u64, PayError> {
    if amount == 0 {
        let io_error = std::io::Error::other("connection reset");
        return Err(io_error);
    }
    Ok(amount)
}

#[resilient(deadline_ms = 1000)]
async fn refund(amount: u64) -> Result<u64, PayError> {
    Err(std::io::Error::other("declined"))
}

fn main() {}
