//! The expansion of `#[resilient]` is lint-clean: this crate denies all of
//! rustc's warnings and clippy's default and pedantic groups, so
//! `cargo clippy --all-targets -- -D warnings` fails if generated code trips
//! any of them. (The trybuild pass tests run rustc only.)
#![deny(warnings, clippy::all, clippy::pedantic)]

use std::fmt::Display;

use resilient::{Classification, Classify, IdempotencyKey, resilient};

#[derive(Debug)]
enum PayError {
    Declined,
    Unavailable,
    Resilience(resilient::Error),
}

impl From<resilient::Error> for PayError {
    fn from(e: resilient::Error) -> Self {
        PayError::Resilience(e)
    }
}

impl Classify for PayError {
    fn classify(&self) -> Classification {
        match self {
            PayError::Declined => Classification::Permanent,
            PayError::Unavailable => Classification::Transient,
            PayError::Resilience(e) => e.classify(),
        }
    }
}

fn never(_: &PayError) -> Classification {
    Classification::Permanent
}

#[resilient]
async fn bare() -> Result<(), PayError> {
    Ok(())
}

#[resilient(deadline_ms = 1000, timeout_ms = 100)]
async fn once(amount: u64) -> Result<u64, PayError> {
    if amount == 0 {
        return Err(PayError::Declined);
    }
    Ok(amount)
}

#[resilient(
    retries = 3,
    idempotent,
    deadline_ms = 2000,
    timeout_ms = 500,
    backoff = "exponential",
    base_ms = 1,
    cap_ms = 10,
    classify = never,
    crate = "::resilient"
)]
async fn every_key(amount: u64) -> Result<u64, PayError> {
    Ok(amount)
}

#[resilient(retries = 2)]
async fn keyed(
    key: &IdempotencyKey,
    mut tries: u32,
    (a, b): (u32, u32),
    label: String,
) -> Result<String, PayError> {
    tries += a + b;
    if tries > 100 {
        return Err(PayError::Unavailable);
    }
    Ok(format!("{key}/{tries}/{label}"))
}

#[resilient(retries = 1, idempotent)]
async fn generic<T: Display + Clone>(
    value: T,
    shown: impl Display + Clone,
) -> Result<String, PayError> {
    Ok(format!("{value}{shown}"))
}

#[resilient(retries = 1, idempotent)]
async fn io(path: &str) -> std::io::Result<usize> {
    Ok(path.len())
}

struct Service {
    name: String,
}

impl Service {
    #[resilient(retries = 1, idempotent, timeout_ms = 100)]
    async fn name(&self, suffix: &str) -> Result<String, PayError> {
        Ok(format!("{}{suffix}", self.name))
    }
}

trait Lookup {
    async fn lookup(&self, id: u32) -> Result<u32, PayError>;
}

impl Lookup for Service {
    #[resilient(retries = 1, idempotent)]
    async fn lookup(&self, id: u32) -> Result<u32, PayError> {
        Ok(id)
    }
}

#[allow(clippy::unused_async)]
async fn dependency() -> Result<u32, PayError> {
    Ok(7)
}

// A one-line body used to make the expansion warn `unused_braces` (the
// body's braces inside the generated `async move { … }`), failing
// `-D warnings` builds.
#[resilient(retries = 2, idempotent)]
async fn one_line_with_retries() -> Result<u32, PayError> {
    dependency().await
}

#[allow(clippy::unused_async)]
async fn zero(_: PayError) -> Result<u32, PayError> {
    Ok(0)
}

#[resilient(fallback = zero)]
async fn one_line_with_fallback() -> Result<u32, PayError> {
    dependency().await
}

#[resilient(retries = 1, idempotent, fallback = zero)]
async fn one_line_with_both() -> Result<u32, PayError> {
    dependency().await
}

#[resilient(deadline_ms = 100)]
async fn one_line_once() -> Result<u32, PayError> {
    dependency().await
}

#[resilient(retries = 1, idempotent)]
async fn one_line_with_arguments(a: u32, (b, c): (u32, u32)) -> Result<u32, PayError> {
    Ok(a + b + c)
}

// The body's own inner attributes stay first in the block the expansion
// builds around it.
#[resilient(retries = 1, idempotent)]
async fn inner_attribute(n: u32) -> Result<u32, PayError> {
    #![allow(clippy::needless_return)]
    return Ok(n);
}

struct Names(String);

impl Names {
    // A borrowed return type is stated inside each attempt too.
    #[resilient(retries = 1, idempotent)]
    async fn first(&self) -> Result<&str, PayError> {
        Ok(&self.0)
    }
}

/// An argument the body leaves unused, named so (review 44: clippy's
/// `used_underscore_binding` fired at its type, for the copy each attempt
/// makes), and items before the body's first statement (review 44:
/// `items_after_statements`, as if after the expansion's own statement).
#[resilient(retries = 1, idempotent)]
async fn unused_argument(_unused: u32, n: u32) -> Result<u32, PayError> {
    use std::fmt::Write as _;
    const BASE: u32 = 10;
    fn double(n: u32) -> u32 {
        n * 2
    }
    let mut text = String::new();
    write!(text, "{n}").map_err(|_| PayError::Declined)?;
    Ok(double(n) + BASE + u32::try_from(text.len()).unwrap_or(0))
}

#[resilient(deadline_ms = 100)]
async fn item_first_once(n: u32) -> Result<u32, PayError> {
    use std::fmt::Write as _;
    let mut text = String::new();
    write!(text, "{n}").map_err(|_| PayError::Declined)?;
    Ok(n)
}

#[allow(clippy::unused_async)]
async fn zero_for(_key: &IdempotencyKey, _unused: u32, _: PayError) -> Result<u32, PayError> {
    Ok(0)
}

// `idempotent`: a retried function that takes its key as `_key` (marked
// unused, so never sent) is refused; one marked `idempotent` may.
#[resilient(retries = 2, idempotent, fallback = zero_for)]
async fn keyed_unused(_key: &IdempotencyKey, _unused: u32) -> Result<u32, PayError> {
    Err(PayError::Unavailable)
}

#[tokio::test]
async fn one_line_bodies_run() {
    assert_eq!(inner_attribute(4).await.unwrap(), 4);
    assert_eq!(Names("n".to_owned()).first().await.unwrap(), "n");
    assert_eq!(one_line_with_retries().await.unwrap(), 7);
    assert_eq!(one_line_with_fallback().await.unwrap(), 7);
    assert_eq!(one_line_with_both().await.unwrap(), 7);
    assert_eq!(one_line_once().await.unwrap(), 7);
    assert_eq!(one_line_with_arguments(1, (2, 3)).await.unwrap(), 6);
}

#[tokio::test]
async fn annotated_functions_run() {
    let service = Service {
        name: "s".to_owned(),
    };
    bare().await.unwrap();
    assert_eq!(once(1).await.unwrap(), 1);
    assert!(matches!(once(0).await, Err(PayError::Declined)));
    assert_eq!(every_key(2).await.unwrap(), 2);
    let key = IdempotencyKey::from_stable_id("k").unwrap();
    assert_eq!(
        keyed(&key, 0, (1, 2), "l".to_owned()).await.unwrap(),
        "k/3/l"
    );
    assert_eq!(generic(1, 'x').await.unwrap(), "1x");
    assert_eq!(io("ab").await.unwrap(), 2);
    assert_eq!(service.name("!").await.unwrap(), "s!");
    assert_eq!(service.lookup(3).await.unwrap(), 3);
    assert_eq!(unused_argument(0, 4).await.unwrap(), 19);
    assert_eq!(item_first_once(4).await.unwrap(), 4);
    let registry = resilient::Registry::builder().build().unwrap();
    assert_eq!(registry.scope(keyed_unused(&key, 1)).await.unwrap(), 0);
}
