//! `resilient`: calls to unreliable dependencies made safe by default.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod classify;
mod config;
mod error;
mod outcome;
mod rng;
mod sync;

mod breaker;
mod budget;
mod bulkhead;
mod throttle;

pub use classify::{Classification, Classify};
pub use config::{ConfigError, Problem};
pub use error::{Error, ErrorKind};
pub use rng::seed_jitter;

pub use breaker::*;
pub use budget::*;
pub use bulkhead::*;
pub use throttle::*;
