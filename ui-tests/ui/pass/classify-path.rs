// `classify = path` for error types that cannot implement
// `resilient::Classify`: a boxed `dyn Error` carrying a foreign
// `std::num::ParseIntError`, and `std::io::Error` classified differently
// from the library's default.

use std::error::Error as StdError;
use std::num::ParseIntError;

use resilient::{Classification, resilient};

type BoxError = Box<dyn StdError + Send + Sync>;

fn by_downcast(e: &BoxError) -> Classification {
    if e.is::<ParseIntError>() {
        Classification::Permanent
    } else {
        Classification::Transient
    }
}

#[resilient(retries = 2, idempotent, classify = by_downcast)]
async fn parse(text: String) -> Result<u32, BoxError> {
    Ok(text.parse::<u32>()?)
}

mod policy {
    pub(crate) fn never_retry(_: &std::io::Error) -> resilient::Classification {
        resilient::Classification::Permanent
    }
}

#[resilient(retries = 2, idempotent, classify = policy::never_retry)]
async fn read(path: &'static str) -> std::io::Result<usize> {
    Ok(path.len())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(parse("42".to_owned()).await.unwrap(), 42);
    assert!(parse("x".to_owned()).await.is_err());
    assert_eq!(read("a").await.unwrap(), 1);
}
