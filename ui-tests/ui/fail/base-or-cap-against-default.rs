use resilient::resilient;

// Above the default `cap_ms` (30 000).
#[resilient(retries = 1, idempotent, base_ms = 60000)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

// Below the default `base_ms` (100).
#[resilient(retries = 1, idempotent, cap_ms = 50)]
async fn store() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
