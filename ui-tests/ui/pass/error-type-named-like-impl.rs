// A type whose name merely contains the letters `impl` is an ordinary
// type: the expansion names it (regression: `SimpleError` was taken for
// `impl Trait` and the function failed to compile).
use resilient::{Classification, Classify, resilient};

#[derive(Debug)]
pub enum SimpleError {
    Io(std::io::Error),
    Resilience(resilient::Error),
}

impl From<resilient::Error> for SimpleError {
    fn from(e: resilient::Error) -> Self {
        SimpleError::Resilience(e)
    }
}

impl From<std::io::Error> for SimpleError {
    fn from(e: std::io::Error) -> Self {
        SimpleError::Io(e)
    }
}

impl Classify for SimpleError {
    fn classify(&self) -> Classification {
        match self {
            SimpleError::Io(e) => e.classify(),
            SimpleError::Resilience(e) => e.classify(),
        }
    }
}

fn parse(s: &str) -> Result<u32, std::io::Error> {
    s.parse()
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))
}

#[resilient(retries = 2, idempotent)]
async fn simple(text: &str) -> Result<u32, SimpleError> {
    let n = parse(text)?;
    Ok(n)
}

#[tokio::main]
async fn main() {
    assert_eq!(simple("7").await.unwrap(), 7);
}
