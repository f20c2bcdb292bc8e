// A constant for a number: the attribute reads its arguments as the
// function compiles, before any constant's value is known.

use resilient::resilient;

const TIMEOUT: u64 = 100;

#[resilient(deadline_ms = TIMEOUT)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
