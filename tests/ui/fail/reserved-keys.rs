// Keys reserved for the breaker, budget, bulkhead and fallback layers.
// Re-bless this file when those layers land.

use resilient::resilient;

fn cached(_: std::io::Error) -> Result<(), std::io::Error> {
    Ok(())
}

#[resilient(breaker = "x", budget = "x", bulkhead = "x", fallback = cached)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
