// Negative numbers are refused saying so (review 21: the message was the
// integer parser's "invalid digit found in string").

#[resilient::resilient(retries = -1, idempotent)]
async fn negative_retries() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient::resilient(deadline_ms = -5)]
async fn negative_deadline() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
