use resilient::resilient;

#[resilient(deadline_ms = 0)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
