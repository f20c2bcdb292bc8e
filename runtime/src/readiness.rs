//! Readiness: which dependencies are unavailable right now, as plain data
//! for a `/health/ready` endpoint (and, with feature `axum`, the endpoint
//! itself: `resilient::readiness::axum::route`).
//!
//! A service is not ready while one of its dependencies is known to be
//! unavailable (its breaker open or forced open; an open breaker only until
//! its wait is over, when it would admit a probe, even if no call has come
//! to make one: out of rotation, no call would) or while it drains for a
//! [graceful shutdown](crate::GracefulShutdown): a load balancer that asks
//! then sends its traffic elsewhere instead of into refusals.
//!
//! A bulkhead out of slots is listed as *saturated* but leaves the service
//! ready: it says the instance is busy, not that a dependency is down, and
//! taking busy instances out of rotation moves their load onto the others,
//! which then fill up too: the cascade the SRE book warns against
//! ("Addressing Cascading Failures", on health checks that fail under load,
//! <https://sre.google/sre-book/addressing-cascading-failures/>). Load is
//! what the bulkhead itself, retry budgets and load shedding handle.
//!
//! Whether that should take a pod out of rotation is the operator's call:
//! when every replica shares the broken dependency, all of them turn not
//! ready at once. Readiness, not liveness: never restart a process because
//! a dependency is down.

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;

use crate::{Registry, State};

/// Whether the service should receive traffic, and why not.
///
/// Serializable with feature `serde`, as
/// `{"ready":false,"shutting_down":false,"unavailable":[{"kind":"breaker","name":"payments","reason":"open"}],"saturated":[]}`.
///
/// ```
/// use resilient::Registry;
///
/// let registry = Registry::builder().build().unwrap();
/// assert!(registry.readiness().ready);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Readiness {
    /// Nothing is unavailable and the process is not shutting down.
    pub ready: bool,
    /// The process drains for a graceful shutdown.
    pub shutting_down: bool,
    /// The parts refusing calls now, sorted by kind and name.
    pub unavailable: Vec<Unavailable>,
    /// Bulkheads with every slot taken, sorted by name: busy, which does
    /// not make the service not ready (see the [module](self)).
    pub saturated: Vec<Unavailable>,
}

/// One part of the registry that refuses calls now, or is saturated.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Unavailable {
    /// A breaker or a bulkhead.
    pub kind: PartKind,
    /// Its name (the dependency's).
    pub name: String,
    /// Why: `open` or `forced_open` for a breaker, `full` for a bulkhead.
    pub reason: &'static str,
}

/// What kind of part is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PartKind {
    /// A circuit breaker.
    Breaker,
    /// A bulkhead.
    Bulkhead,
}

impl Readiness {
    /// The readiness of `registry` now (and of the process: shutdown).
    pub fn of(registry: &Registry) -> Readiness {
        let snapshot = registry.snapshot();
        let mut unavailable = Vec::new();
        for b in &snapshot.breakers {
            let reason = match b.state {
                State::Open => "open",
                State::ForcedOpen => "forced_open",
                _ => continue,
            };
            // An open breaker whose wait is over admits the next call as a
            // probe: the dependency is not known to be unavailable any
            // more. Listing it would keep the instance out of rotation,
            // with no traffic to make that probe, for good.
            if registry
                .breaker(&b.name)
                .is_some_and(|breaker| !breaker.refuses_now())
            {
                continue;
            }
            unavailable.push(Unavailable {
                kind: PartKind::Breaker,
                name: b.name.clone(),
                reason,
            });
        }
        let mut saturated = Vec::new();
        for b in &snapshot.bulkheads {
            if b.in_flight >= b.max_concurrent {
                saturated.push(Unavailable {
                    kind: PartKind::Bulkhead,
                    name: b.name.clone(),
                    reason: "full",
                });
            }
        }
        let shutting_down = crate::shutdown::is_draining();
        Readiness {
            ready: unavailable.is_empty() && !shutting_down,
            shutting_down,
            unavailable,
            saturated,
        }
    }
}

impl Registry {
    /// Which of this registry's dependencies are unavailable now, and
    /// whether the process is shutting down: see [`Readiness`].
    pub fn readiness(&self) -> Readiness {
        Readiness::of(self)
    }
}
