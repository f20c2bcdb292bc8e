#![doc = include_str!("docs/crate.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod backoff;
mod classify;
mod clock;
mod config;
mod context;
mod deps;
mod engine;
mod error;
mod frame;
mod future;
mod grpc_timeout;
mod key;
mod modulo;
mod outcome;
mod registry;
mod report;
mod rng;
mod shutdown;
mod sync;
mod telemetry;
mod time;

mod breaker;
mod budget;
mod bulkhead;
mod throttle;

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;

#[cfg(feature = "grpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
pub mod grpc;

#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod reqwest;

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;

#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod tonic;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub mod readiness;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;

pub use backoff::{Backoff, Delays};
pub use classify::{Classification, Classify};
pub use config::{ConfigError, Problem};
pub use context::{current_deadline, propagate, remaining, with_deadline, with_deadline_at};
pub use engine::MAX_RETRY_AFTER;
pub use error::{Error, ErrorKind};
pub use grpc_timeout::{GrpcTimeout, InvalidGrpcTimeout};
pub use key::{IdempotencyKey, InvalidIdempotencyKey};
pub use readiness::{PartKind, Readiness, Unavailable};
#[allow(deprecated)]
pub use registry::AlreadyInstalled;
pub use registry::{FallbackSnapshot, Registry, RegistryBuilder, RegistrySnapshot};
pub use report::{AttemptOutcome, AttemptRecord, Report, observe};
#[doc = include_str!("docs/attribute.md")]
pub use resilient_macros::resilient;
pub use rng::seed_jitter;
pub use shutdown::{DrainReport, GracefulShutdown, admitted};

pub use breaker::*;
pub use budget::*;
pub use bulkhead::*;
pub use throttle::*;
