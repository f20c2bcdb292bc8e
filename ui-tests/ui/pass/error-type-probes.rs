// A function without retries, breaker or budget needs no `Classify` of its
// error type, yet classifies what it reports (and shows it by `Display`)
// when it can. Finding out must never break code that compiled without it
// (regression: a user's trait with a method named like the probes' broke
// the expansion).
use std::fmt;

use resilient::{Classification, Classify, resilient};

// 1. An error type that borrows, implemented for every lifetime: it is
//    found (implemented for `'static` only, it is not: see
//    ui/fail/error-type-classify-static-only.rs).
#[derive(Debug)]
pub enum LtErr<'a> {
    Bad(&'a str),
    Resilience(resilient::Error),
}

impl From<resilient::Error> for LtErr<'_> {
    fn from(e: resilient::Error) -> Self {
        LtErr::Resilience(e)
    }
}

impl Classify for LtErr<'_> {
    fn classify(&self) -> Classification {
        Classification::Permanent
    }
}

impl fmt::Display for LtErr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("lt error")
    }
}

#[resilient(deadline_ms = 100)]
async fn borrowed<'a>(text: &'a str) -> Result<u32, LtErr<'a>> {
    text.parse().map_err(|_| LtErr::Bad(text))
}

#[resilient(timeout_ms = 100)]
async fn elided(text: &str) -> Result<u32, LtErr<'_>> {
    text.parse().map_err(|_| LtErr::Bad(text))
}

impl<'a> LtErr<'a> {
    #[resilient(timeout_ms = 100)]
    pub async fn parse_self(text: &'a str) -> Result<u32, Self> {
        text.parse().map_err(|_| LtErr::Bad(text))
    }
}

// 2. A trait of the user's, in scope, with blanket methods named like the
//    probes' would be in plain words: no ambiguity.
pub trait Helpers {
    fn classifier(&self) -> u8 {
        1
    }
    fn describer(&self) -> u8 {
        2
    }
}
impl<T: ?Sized> Helpers for T {}

#[derive(Debug)]
pub struct PlainErr(resilient::Error);

impl From<resilient::Error> for PlainErr {
    fn from(e: resilient::Error) -> Self {
        PlainErr(e)
    }
}

impl Classify for PlainErr {
    fn classify(&self) -> Classification {
        self.0.classify()
    }
}

impl fmt::Display for PlainErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[resilient(deadline_ms = 100)]
async fn with_helpers_in_scope() -> Result<u8, PlainErr> {
    Ok(().classifier() + ().describer())
}

#[tokio::main]
async fn main() {
    let text = String::from("7");
    assert_eq!(borrowed(&text).await.unwrap(), 7);
    assert!(matches!(borrowed("x").await, Err(LtErr::Bad("x"))));
    assert_eq!(elided(&text).await.unwrap(), 7);
    assert_eq!(LtErr::parse_self(&text).await.unwrap(), 7);
    assert_eq!(with_helpers_in_scope().await.unwrap(), 3);
}
