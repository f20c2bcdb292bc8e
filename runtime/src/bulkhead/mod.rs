//! Bulkheads: a limit on the calls in flight to one dependency, so that a
//! slow dependency ties up a bounded share of the caller, not all of it.
//!
//! Why: without a limit, calls to a slow dependency pile up until they hold
//! every task, connection and byte of memory the caller has, and one slow
//! dependency takes the whole service down. The defaults, their sources and
//! why waiting is off by default (a queue turns "fail fast" into "fail
//! after the deadline") are on [`Bulkhead`], where users read them.
//!
//! This module owns the bulkhead, its configuration and permits, and the
//! slot counter in `core.rs` (compiled as it ships by the loom models).
//! Only callers that have to wait touch the [`tokio::sync::Notify`] that
//! released slots wake.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::{ConfigError, Problem};
use crate::sync::atomic::{AtomicU64, Ordering};

mod core;

use self::core::Slots;

const SECTION: &str = "bulkhead";
const DEFAULT_MAX_CONCURRENT: usize = 25;
/// The longest `max_wait` accepted: no caller should queue for longer.
const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// How a [`Bulkhead`] limits calls: `max_concurrent` calls in flight
/// (default 25, more than 0) and how long a call may wait for a slot,
/// `max_wait` (default 0: refuse at once). See the
/// [`Bulkhead`] for the defaults.
///
/// ```
/// use std::time::Duration;
/// use resilient::{Bulkhead, BulkheadConfig};
///
/// let config = BulkheadConfig::default().max_concurrent(10).max_wait(Duration::from_millis(50));
/// let bulkhead = Bulkhead::new("inventory", config)?;
/// assert_eq!(bulkhead.in_flight(), 0);
/// # Ok::<(), resilient::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkheadConfig {
    max_concurrent: usize,
    max_wait: Duration,
}

impl Default for BulkheadConfig {
    /// 25 calls in flight, no waiting.
    fn default() -> Self {
        Self {
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            max_wait: Duration::ZERO,
        }
    }
}

impl BulkheadConfig {
    /// The most calls in flight at once. Key `max_concurrent`.
    pub fn max_concurrent(mut self, max: usize) -> Self {
        self.max_concurrent = max;
        self
    }

    /// How long a call may wait for a free slot before it is refused; zero
    /// refuses at once. Key `max_wait_ms`.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// Every range problem of this configuration for the bulkhead `name`.
    pub(crate) fn validate(&self, name: &str) -> Vec<Problem> {
        self.problems(Some(name))
    }

    fn problems(&self, name: Option<&str>) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.max_concurrent == 0 {
            problems.push(Problem::new(
                SECTION,
                name,
                "max_concurrent",
                self.max_concurrent,
                "must be at least 1; a bulkhead of 0 would refuse every call",
            ));
        }
        if self.max_wait > MAX_WAIT {
            problems.push(Problem::new(
                SECTION,
                name,
                "max_wait_ms",
                self.max_wait.as_millis(),
                format!("must be at most {} (a day)", MAX_WAIT.as_millis()),
            ));
        }
        problems
    }
}

#[cfg(feature = "serde")]
impl crate::config::setting::Settings for BulkheadConfig {
    const SECTION: &'static str = SECTION;
    const KEYS: &'static [&'static str] = &["max_concurrent", "max_wait_ms"];
    const EXPECTING: &'static str = "a bulkhead's settings";

    fn set(&mut self, key: &str, value: &crate::config::setting::RawValue) -> Result<(), String> {
        use crate::config::setting;
        match key {
            // Beyond `usize` is stored saturated: no bulkhead needs more.
            "max_concurrent" => {
                self.max_concurrent = usize::try_from(setting::count(value)?).unwrap_or(usize::MAX)
            }
            "max_wait_ms" => self.max_wait = setting::millis(value)?,
            _ => unreachable!("keys are checked against KEYS first"),
        }
        Ok(())
    }

    fn problems(&self, name: Option<&str>) -> Vec<Problem> {
        BulkheadConfig::problems(self, name)
    }
}

/// Reads the keys `max_concurrent` and `max_wait_ms`; unknown keys and
/// out-of-range values are errors naming the key.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for BulkheadConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::config::setting::deserialize(deserializer)
    }
}

#[cfg(feature = "toml")]
impl BulkheadConfig {
    /// Reads the configuration of the bulkhead `name` from a TOML table of
    /// keys, reporting every problem at once.
    ///
    /// ```
    /// let config = resilient::BulkheadConfig::from_toml("inventory", "max_concurrent = 8")?;
    /// # let _ = config;
    /// # Ok::<(), resilient::ConfigError>(())
    /// ```
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        crate::config::setting::from_toml(name, text)
    }
}

/// A limit on the calls in flight to one dependency, shared (in an `Arc`)
/// by every call to it.
///
/// When a dependency slows down, calls to it pile up: each holds a task, a
/// connection, memory, perhaps a database transaction of the caller. Without
/// a limit one slow dependency exhausts what every other code path of the
/// service needs. A [`Bulkhead`] caps the calls in flight to one dependency
/// at `max_concurrent` and refuses the rest with
/// [`ErrorKind::BulkheadFull`](crate::ErrorKind::BulkheadFull).
///
/// Defaults, and why:
///
/// * `max_concurrent = 25`: Resilience4j's `Bulkhead` default
///   (`maxConcurrentCalls`), a common starting point. Size it with Little's
///   law: the calls in flight are the call rate times the latency, so 25
///   allows 250 calls per second at 100 ms.
/// * `max_wait = 0`, reject at once (also Resilience4j's default). A call
///   waiting for a slot still holds the caller's own resources and adds
///   queueing delay to every call behind it; when the dependency is
///   saturated, the queue only turns "fail fast" into "fail slowly, after
///   the caller's own deadline". Failing at once leaves the decision (fall
///   back, shed, answer from cache) to the caller while it still has time.
///   A short wait smooths bursts when the dependency is merely busy; the
///   wait never outlasts the call's deadline.
///
/// Taking a free slot takes no lock and allocates nothing.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), resilient::Error> {
/// let bulkhead = resilient::Bulkhead::new("inventory", Default::default()).unwrap();
/// let permit = bulkhead.acquire(None).await?;
/// assert_eq!(bulkhead.in_flight(), 1);
/// drop(permit); // the slot is free again, also when a call is cancelled
/// assert_eq!(bulkhead.in_flight(), 0);
/// # Ok(()) }
/// ```
pub struct Bulkhead {
    name: Arc<str>,
    slots: Slots,
    max_wait: Duration,
    /// Wakes waiters when a slot is released; unused when `max_wait` is 0.
    released: Notify,
    rejected: AtomicU64,
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl Bulkhead {
    /// A bulkhead named `name` (the dependency it guards), or every problem
    /// with `config` or the name (a registry's rule for names).
    pub fn new(name: impl Into<Arc<str>>, config: BulkheadConfig) -> Result<Self, ConfigError> {
        let name = name.into();
        ConfigError::of_part("bulkhead", &name, config.validate(&name))?;
        Ok(Self::from_validated(name, config))
    }

    /// A bulkhead from a configuration [`BulkheadConfig::validate`]
    /// accepted.
    pub(crate) fn from_validated(name: Arc<str>, config: BulkheadConfig) -> Self {
        Self {
            name,
            slots: Slots::new(config.max_concurrent),
            max_wait: config.max_wait,
            released: Notify::new(),
            rejected: AtomicU64::new(0),
        }
    }

    /// The name of the dependency this bulkhead guards.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Counts a refusal and makes its error.
    pub(crate) fn refuse(&self) -> crate::Error {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        crate::Error::bulkhead_full(self.name.clone())
    }

    /// Takes a slot if one is free now; counts nothing when none is (the
    /// caller may wait for one, and is refused, once, only if it gets none).
    #[inline]
    pub(crate) fn try_take(&self) -> Option<BulkheadPermit<'_>> {
        self.slots.try_acquire().then(|| self.permit())
    }

    fn permit(&self) -> BulkheadPermit<'_> {
        BulkheadPermit { bulkhead: self }
    }

    /// Takes a slot if one is free now, without waiting, whatever
    /// `max_wait` says.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::BulkheadFull`](crate::ErrorKind::BulkheadFull), naming
    /// this bulkhead, when every slot is taken.
    pub fn try_acquire(&self) -> Result<BulkheadPermit<'_>, crate::Error> {
        if self.slots.try_acquire() {
            Ok(self.permit())
        } else {
            Err(self.refuse())
        }
    }

    /// Takes a slot, waiting for one at most `max_wait`, and never past
    /// `deadline` (the call's own deadline, when it has one). Dropping the
    /// returned future while it waits gives up its place and takes nothing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::BulkheadFull`](crate::ErrorKind::BulkheadFull), naming
    /// this bulkhead, when no slot came free in time.
    pub async fn acquire(
        &self,
        deadline: Option<Instant>,
    ) -> Result<BulkheadPermit<'_>, crate::Error> {
        if self.slots.try_acquire() {
            return Ok(self.permit());
        }
        let now = Instant::now();
        let mut until = now + self.max_wait;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        if until <= now {
            return Err(self.refuse());
        }
        loop {
            let notified = self.released.notified();
            tokio::pin!(notified);
            // Registered before looking at the count: a slot released after
            // the look below wakes this waiter, so no release goes unseen.
            notified.as_mut().enable();
            if self.slots.try_acquire() {
                return Ok(self.permit());
            }
            if tokio::time::timeout_at(until, notified).await.is_err() {
                // One last look: a slot may have come free as time ran out.
                return self.try_acquire();
            }
            // Woken: a slot was released, but another caller may take it
            // first (the fast path does not queue); look again.
        }
    }

    /// Can [`acquire`](Bulkhead::acquire) wait (is `max_wait` above zero)?
    pub(crate) fn may_wait(&self) -> bool {
        !self.max_wait.is_zero()
    }

    /// Calls in flight now: slots taken by live permits.
    pub fn in_flight(&self) -> usize {
        self.slots.in_flight()
    }

    /// What the bulkhead holds now.
    pub fn snapshot(&self) -> BulkheadSnapshot {
        BulkheadSnapshot {
            name: self.name.to_string(),
            max_concurrent: self.slots.max(),
            in_flight: self.slots.in_flight(),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }
}

/// A slot in a [`Bulkhead`], held for the duration of one call. Dropping
/// it gives the slot back, so a call that panics or is cancelled frees its
/// slot too.
#[must_use = "the slot is given back as soon as the permit is dropped"]
pub struct BulkheadPermit<'a> {
    bulkhead: &'a Bulkhead,
}

impl fmt::Debug for BulkheadPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadPermit")
            .field("bulkhead", &self.bulkhead.name)
            .finish()
    }
}

impl Drop for BulkheadPermit<'_> {
    fn drop(&mut self) {
        self.bulkhead.slots.release();
        // Without waiting nobody ever waits: skip the wake-up.
        if !self.bulkhead.max_wait.is_zero() {
            self.bulkhead.released.notify_one();
        }
    }
}

/// What a [`Bulkhead`] holds at one moment: plain data for metrics and
/// health pages.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct BulkheadSnapshot {
    /// The bulkhead's name.
    pub name: String,
    /// Its limit on calls in flight.
    pub max_concurrent: usize,
    /// Calls in flight now.
    pub in_flight: usize,
    /// Calls refused since the bulkhead was made.
    pub rejected: u64,
}
