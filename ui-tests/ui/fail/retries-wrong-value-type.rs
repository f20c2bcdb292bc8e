use resilient::resilient;

#[resilient(retries = "3", idempotent)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
