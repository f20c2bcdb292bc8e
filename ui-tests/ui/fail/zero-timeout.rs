use resilient::resilient;

#[resilient(timeout_ms = 0)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
