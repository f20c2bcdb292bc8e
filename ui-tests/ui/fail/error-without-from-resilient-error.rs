// The error type must carry the library's own refusals (a passed deadline,
// a timed-out attempt).

use resilient::resilient;

#[derive(Debug)]
enum FetchError {
    NotFound,
}

#[resilient(deadline_ms = 100)]
async fn fetch(id: u32) -> Result<u32, FetchError> {
    if id == 0 {
        return Err(FetchError::NotFound);
    }
    Ok(id)
}

fn main() {}
