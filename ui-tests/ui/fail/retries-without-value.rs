use resilient::resilient;

#[resilient(retries, idempotent)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
