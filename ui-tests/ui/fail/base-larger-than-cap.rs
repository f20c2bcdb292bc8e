use resilient::resilient;

#[resilient(retries = 2, idempotent, base_ms = 500, cap_ms = 100)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
