//! What breakers tell observers: transitions, rejections, tripped thresholds.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};

use super::State;

/// Something a circuit breaker did that an observer may want to know.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum BreakerEvent {
    /// The breaker moved from one state to another.
    StateTransition {
        /// The breaker's name.
        name: Arc<str>,
        /// The state it left.
        from: State,
        /// The state it entered.
        to: State,
    },
    /// A call was rejected without being run.
    CallNotPermitted {
        /// The breaker's name.
        name: Arc<str>,
    },
    /// The failure rate reached the threshold; the breaker opens.
    FailureRateExceeded {
        /// The breaker's name.
        name: Arc<str>,
        /// The failure rate, in percent.
        rate: f32,
    },
    /// The slow-call rate reached the threshold; the breaker opens.
    SlowCallRateExceeded {
        /// The breaker's name.
        name: Arc<str>,
        /// The slow-call rate, in percent.
        rate: f32,
    },
}

impl BreakerEvent {
    /// The name of the breaker the event is about.
    pub fn name(&self) -> &str {
        match self {
            BreakerEvent::StateTransition { name, .. }
            | BreakerEvent::CallNotPermitted { name }
            | BreakerEvent::FailureRateExceeded { name, .. }
            | BreakerEvent::SlowCallRateExceeded { name, .. } => name,
        }
    }
}

type Subscriber = Arc<dyn Fn(&BreakerEvent) + Send + Sync>;

/// Delivers breaker events to subscribers. The breakers of one registry share
/// one hub.
///
/// Costs one relaxed load per would-be event while nobody subscribes; events
/// come from transitions and rejections, never from a call that succeeds in a
/// closed breaker, so the lock taken to deliver them stays off that path.
pub struct EventHub {
    anyone: AtomicBool,
    next_id: AtomicU64,
    subscribers: RwLock<Vec<(u64, Subscriber)>>,
}

impl fmt::Debug for EventHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self
            .subscribers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("EventHub")
            .field("subscribers", &count)
            .finish()
    }
}

impl EventHub {
    pub(crate) fn new() -> Arc<EventHub> {
        Arc::new(EventHub {
            anyone: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            subscribers: RwLock::new(Vec::new()),
        })
    }

    /// Calls `f` with every event of every breaker sharing this hub, until the
    /// returned [`Subscription`] is dropped. `f` runs on the thread that
    /// caused the event, so it should be quick.
    pub fn subscribe(
        self: &Arc<Self>,
        f: impl Fn(&BreakerEvent) + Send + Sync + 'static,
    ) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut subscribers = self
            .subscribers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.push((id, Arc::new(f)));
        self.anyone.store(true, Ordering::Release);
        Subscription {
            hub: Arc::downgrade(self),
            id,
        }
    }

    /// Whether an event would reach anyone: lets the emitter skip building it.
    pub(crate) fn is_observed(&self) -> bool {
        self.anyone.load(Ordering::Acquire)
    }

    pub(crate) fn emit(&self, event: &BreakerEvent) {
        if !self.is_observed() {
            return;
        }
        // Cloned out of the lock so that a subscriber may subscribe or
        // unsubscribe from inside its callback without deadlocking.
        let subscribers: Vec<Subscriber> = self
            .subscribers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, s)| Arc::clone(s))
            .collect();
        for subscriber in subscribers {
            subscriber(event);
        }
    }

    fn unsubscribe(&self, id: u64) {
        let mut subscribers = self
            .subscribers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.retain(|(i, _)| *i != id);
        self.anyone
            .store(!subscribers.is_empty(), Ordering::Release);
    }
}

/// A subscription to breaker events; dropping it unsubscribes.
#[must_use = "dropping a `Subscription` unsubscribes at once"]
pub struct Subscription {
    hub: Weak<EventHub>,
    id: u64,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.unsubscribe(self.id);
        }
    }
}
