// Bodies use `?` on different error types converted with `From`, return
// early with `return Err(...)`, and end in `Ok(())`.

use std::num::ParseIntError;

use resilient::{Classification, Classify, resilient};

#[derive(Debug)]
enum AppError {
    Parse(ParseIntError),
    Io(std::io::Error),
    TooBig,
    Resilience(resilient::Error),
}

impl From<ParseIntError> for AppError {
    fn from(e: ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

impl From<std::io::Error> for AppError {
    fn from(e: std::io::Error) -> Self {
        AppError::Io(e)
    }
}

impl From<resilient::Error> for AppError {
    fn from(e: resilient::Error) -> Self {
        AppError::Resilience(e)
    }
}

impl Classify for AppError {
    fn classify(&self) -> Classification {
        match self {
            AppError::Io(e) => e.classify(),
            AppError::Parse(_) | AppError::TooBig => Classification::Permanent,
            AppError::Resilience(e) => e.classify(),
        }
    }
}

fn check_io(fail: bool) -> Result<(), std::io::Error> {
    if fail {
        Err(std::io::ErrorKind::NotFound.into())
    } else {
        Ok(())
    }
}

#[resilient(retries = 2, idempotent, deadline_ms = 1000)]
async fn store(text: &str, fail_io: bool) -> Result<(), AppError> {
    let n: u32 = text.parse()?;
    if n > 100 {
        return Err(AppError::TooBig);
    }
    check_io(fail_io)?;
    Ok(())
}

#[resilient(deadline_ms = 1000)]
async fn store_once(text: &str) -> Result<u32, AppError> {
    let n: u32 = text.parse()?;
    if n == 0 {
        return Ok(0);
    }
    Ok(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    store("1", false).await.unwrap();
    assert!(matches!(store("x", false).await, Err(AppError::Parse(_))));
    assert!(matches!(store("101", false).await, Err(AppError::TooBig)));
    assert!(matches!(store("1", true).await, Err(AppError::Io(_))));
    assert_eq!(store_once("0").await.unwrap(), 0);
}
