use resilient::resilient;

#[resilient(retries = 2, idempotent = true)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
