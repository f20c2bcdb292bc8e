// A `classify` function for another error type than the function's.

use resilient::{Classification, resilient};

fn by_message(_: &String) -> Classification {
    Classification::Transient
}

#[resilient(retries = 2, idempotent, classify = by_message)]
async fn read(n: u32) -> Result<u32, std::io::Error> {
    Ok(n)
}

fn main() {}
