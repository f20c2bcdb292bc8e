use resilient::resilient;

// Names other retry libraries use: pointed to `retries`.
#[resilient(max_attempts = 4)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(max_retries = 3)]
async fn store() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
