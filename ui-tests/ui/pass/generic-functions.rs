// Generic functions: type parameters, where clauses, lifetimes, const generics.

use std::fmt::Display;

use resilient::resilient;

#[resilient(retries = 2, idempotent)]
async fn describe<T: Display + Clone>(value: T) -> Result<String, std::io::Error> {
    Ok(value.to_string())
}

#[resilient(retries = 2, idempotent)]
async fn first<'a, T>(items: &'a [T]) -> Result<&'a T, std::io::Error>
where
    T: Sync,
{
    items
        .first()
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
}

#[resilient(deadline_ms = 100)]
async fn sum<const N: usize>(values: [u32; N]) -> Result<u32, std::io::Error> {
    Ok(values.iter().sum())
}

#[resilient(retries = 1, idempotent)]
async fn convert<E>(n: u32) -> Result<u32, E>
where
    E: From<resilient::Error> + resilient::Classify,
{
    Ok(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(describe(5).await.unwrap(), "5");
    assert_eq!(*first(&[1, 2]).await.unwrap(), 1);
    assert_eq!(sum([1, 2, 3]).await.unwrap(), 6);
    assert_eq!(convert::<std::io::Error>(3).await.unwrap(), 3);
}
