// A type error inside the body reads as it would without the attribute: a
// plain E0308 at the user's expression.

use resilient::resilient;

#[resilient(retries = 1, idempotent, fallback = zero)]
async fn count(text: &str) -> Result<u32, std::io::Error> {
    let n: u32 = "s";
    Ok(n + text.len() as u32)
}

async fn zero(_: &str, _: std::io::Error) -> Result<u32, std::io::Error> {
    Ok(0)
}

#[resilient(retries = 1, idempotent)]
async fn total(values: Vec<u32>) -> Result<u32, std::io::Error> {
    values.iter().sum::<u32>()
}

fn main() {}
