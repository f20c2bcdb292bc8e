// `retries` on a function marked `idempotent`: running it twice is harmless.

use resilient::{Classification, Classify, resilient};

#[derive(Debug)]
enum FetchError {
    Unavailable,
    Resilience(resilient::Error),
}

impl From<resilient::Error> for FetchError {
    fn from(e: resilient::Error) -> Self {
        FetchError::Resilience(e)
    }
}

impl Classify for FetchError {
    fn classify(&self) -> Classification {
        match self {
            FetchError::Unavailable => Classification::Transient,
            FetchError::Resilience(e) => e.classify(),
        }
    }
}

#[resilient(retries = 3, idempotent)]
async fn fetch_price(sku: u32) -> Result<u32, FetchError> {
    if sku == 0 {
        return Err(FetchError::Unavailable);
    }
    Ok(sku * 100)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(fetch_price(7).await.unwrap(), 700);
}
