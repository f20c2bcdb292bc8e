// A per-attempt timeout at or past the deadline never fires first.

use resilient::resilient;

#[resilient(deadline_ms = 1000, timeout_ms = 1000)]
async fn equal() -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(deadline_ms = 1000, timeout_ms = 5000)]
async fn longer() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
