// `retries` on a function that is neither `idempotent` nor takes a
// `resilient::IdempotencyKey`: a retry could repeat its side effect.

use resilient::resilient;

#[resilient(retries = 3)]
async fn charge(cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

fn main() {}
