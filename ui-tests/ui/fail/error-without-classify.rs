// With retries the error type must say which failures are worth retrying.

use resilient::resilient;

#[derive(Debug)]
enum FetchError {
    NotFound,
    Resilience(resilient::Error),
}

impl From<resilient::Error> for FetchError {
    fn from(e: resilient::Error) -> Self {
        FetchError::Resilience(e)
    }
}

#[resilient(retries = 2, idempotent)]
async fn fetch(id: u32) -> Result<u32, FetchError> {
    if id == 0 {
        return Err(FetchError::NotFound);
    }
    Ok(id)
}

fn main() {}
