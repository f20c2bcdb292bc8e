// An error type from another crate can neither carry `resilient::Error` nor
// implement `Classify` in the user's crate (the orphan rule): the message
// says how to wrap it instead of asking for impossible impls.

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
async fn render(name: &str) -> Result<String, std::fmt::Error> {
    Ok(name.to_owned())
}

#[resilient(deadline_ms = 100)]
async fn label(id: u32) -> Result<u32, String> {
    Ok(id)
}

fn main() {}
