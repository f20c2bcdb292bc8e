use resilient::resilient;

#[resilient(retries = 2, idempotent, backoff = "linear")]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
