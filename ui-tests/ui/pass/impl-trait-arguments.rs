// `impl Trait` arguments: with retries they must be `Clone` too.

use std::fmt::Display;

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
async fn show(value: impl Display + Clone) -> Result<String, std::io::Error> {
    Ok(value.to_string())
}

#[resilient(retries = 2, idempotent)]
async fn call(f: impl Fn() -> u32 + Clone) -> Result<u32, std::io::Error> {
    Ok(f())
}

// Without retries the argument is used once, so no `Clone` is needed.
#[resilient(deadline_ms = 100)]
async fn consume(items: impl IntoIterator<Item = u32>) -> Result<u32, std::io::Error> {
    Ok(items.into_iter().sum())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(show(1).await.unwrap(), "1");
    assert_eq!(call(|| 2).await.unwrap(), 2);
    assert_eq!(consume(vec![1, 2].into_iter()).await.unwrap(), 3);
}
