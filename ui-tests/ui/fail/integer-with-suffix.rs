use resilient::resilient;

// A suffix is not a unit: `5s` would have meant 5 ms.
#[resilient(deadline_ms = 5s)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(retries = 3u32, idempotent)]
async fn store() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(timeout_ms = 250u64)]
async fn load() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
