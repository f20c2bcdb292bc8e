use resilient::resilient;

// Seconds written as milliseconds: a week.
#[resilient(deadline_ms = 604800000)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 2, idempotent, cap_ms = 18446744073709551615)]
async fn poll() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
