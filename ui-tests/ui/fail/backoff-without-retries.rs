// Backoff settings with nothing to space out.

use resilient::resilient;

#[resilient(backoff = "exponential", base_ms = 10, cap_ms = 100)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
