//! Runnable examples of `resilient` live in `examples/`; this library holds
//! what they share: the two experiments behind the README's charts and the
//! code that draws them, so that the examples print and draw the figures and
//! the tests in `tests/` assert the same figures.
//!
//! * [`backoff_sim`]: Marc Brooker's backoff-and-jitter experiment, every
//!   delay drawn from [`resilient::Backoff`];
//! * [`storm`]: the retry-storm experiment of the Google SRE book's chapters
//!   on overload and cascading failures, through `#[resilient]` layers;
//! * [`chart`]: PNG line charts.

pub mod backoff_sim;
pub mod chart;
pub mod storm;
