// `crate = "..."` naming a crate that is there but is not `resilient` (a
// slip for another dependency): one error, where the crate is named, not
// one at each generated path.

use resilient::resilient;

#[resilient(crate = "std", retries = 2, idempotent, breaker = "b", deadline_ms = 100)]
async fn fetch(id: u32) -> Result<u32, std::io::Error> {
    Ok(id)
}

fn main() {}
