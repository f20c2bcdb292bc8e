// A `classify` function that does not return a `Classification`.

use resilient::resilient;

fn is_transient(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::ConnectionReset
}

#[resilient(retries = 2, idempotent, classify = is_transient)]
async fn read(n: u32) -> Result<u32, std::io::Error> {
    Ok(n)
}

fn main() {}
