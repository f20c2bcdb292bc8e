// `crate = "..."` naming a crate that is not there (or the default,
// `::resilient`, when the dependency is renamed in Cargo.toml and `crate` is
// missing, which trybuild cannot set up): one error, where the crate is
// named, not one at each generated path.

use resilient::resilient;

#[resilient(crate = "resilent", retries = 2, idempotent, breaker = "b", fallback = zero)]
async fn fetch(id: u32, key: resilient::IdempotencyKey) -> Result<u32, std::io::Error> {
    let _ = key;
    Ok(id)
}

async fn zero(_: u32, _: resilient::IdempotencyKey, _: std::io::Error) -> Result<u32, std::io::Error> {
    Ok(0)
}

fn main() {}
