//! What breakers tell observers (transitions with their reasons, rejections,
//! tripped thresholds), and how it reaches them without touching the calls.
//!
//! # Delivery
//!
//! A subscriber is someone else's code: it may be slow, block, or panic.
//! None of that may reach a call. So events are never delivered on the
//! thread that caused them: the breaker's state change is committed (and
//! the caller's permit owned) first, then the event is put in a bounded
//! queue with a non-blocking, non-allocating `try_send`, and a delivery
//! thread of the hub's own (spawned at the first subscription, ended when
//! the hub is dropped) hands it to the subscribers. No lock is held while a
//! subscriber runs. The guarantees:
//!
//! * **Order**: one hub delivers its events one at a time, in the order they
//!   were queued, to every subscriber in the order they subscribed. Events
//!   caused by one thread are queued in the order they happened, and a
//!   breaker's transitions in the order they were made, whichever threads
//!   made them: each starts from the state the one before it ended in
//!   (a transition waits for the one before it to be queued; should a
//!   thread be kept off the processor while the breaker makes thousands
//!   more, those go without it, and it comes late rather than never). A
//!   transition and the rates it reports arrive together, nothing between
//!   them (when the queue has no room for all of them, the rates are
//!   dropped, never the transition for them). Rejections are queued as
//!   they happen, without waiting for the transition that opened the
//!   breaker: one made on another thread may arrive just before it.
//! * **At most once**: an event is delivered to each subscriber at most once.
//!   When the queue is full ([`EventHub::QUEUE_CAPACITY`] events waiting,
//!   because a subscriber is slow or blocked) a new event is dropped rather
//!   than waited for; drops are counted
//!   ([`Subscription::dropped_events`]) and the first one is logged at WARN.
//!   The last [`EventHub::RESERVED_FOR_TRANSITIONS`] places are kept for
//!   transitions and the rates they report: a flood of rejections from an
//!   open breaker is dropped first, so that the transition that ends the
//!   outage still reaches a subscriber that keeps the breaker's state
//!   (such as `metrics::spawn_publisher`'s state gauge). If the delivery
//!   thread cannot be started (the system refuses a thread), every event is
//!   dropped and counted, and that is logged once at WARN: subscribers
//!   never run on a caller's thread instead.
//! * **Panics are contained**: a subscriber that panics is caught
//!   (`catch_unwind`), reported once at ERROR via `tracing`, and keeps its
//!   subscription: one bad event should not silence monitoring for good, and
//!   a subscriber that always panics costs only its own time. (With
//!   `panic = "abort"` nothing can be caught; a panicking subscriber then
//!   aborts the process as any panic does.)
//! * **Not synchronous**: when a call returns, the events it caused may not
//!   have been delivered yet. [`Subscription::flush`] waits until every event
//!   queued before it has been delivered (tests use it).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use super::State;
use super::places::Places;

/// Why a breaker changed state: carried by every
/// [`BreakerEvent::StateTransition`] and logged with it. `Display` gives one
/// line fit for a log ("failure rate 60.0 % over 100 calls >= threshold 50 %").
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TransitionReason {
    /// Closed → open: the sliding window's failure rate reached the threshold.
    FailureRate {
        /// The failure rate, in percent.
        rate: f32,
        /// `failure_rate_threshold`, in percent.
        threshold: f32,
        /// How many outcomes the window held.
        calls: u32,
    },
    /// Closed → open: the sliding window's slow-call rate reached the
    /// threshold (and the failure rate did not).
    SlowCallRate {
        /// The slow-call rate, in percent.
        rate: f32,
        /// `slow_call_rate_threshold`, in percent.
        threshold: f32,
        /// How many outcomes the window held.
        calls: u32,
    },
    /// Half-open → open: the probes' failure or slow-call rate reached its
    /// threshold.
    ProbesFailed {
        /// The probes' failure rate, in percent.
        failure_rate: f32,
        /// `failure_rate_threshold`, in percent.
        failure_rate_threshold: f32,
        /// The probes' slow-call rate, in percent.
        slow_call_rate: f32,
        /// `slow_call_rate_threshold`, in percent.
        slow_call_rate_threshold: f32,
        /// How many probes reported.
        calls: u32,
    },
    /// Half-open → closed: every probe reported and both rates stayed below
    /// their thresholds.
    ProbesSucceeded {
        /// How many probes reported.
        calls: u32,
    },
    /// Closed or half-open → open: a failure carried a `Retry-After` and the
    /// breaker is configured with `open_on_retry_after`.
    RetryAfter {
        /// How long the breaker is held open (the `Retry-After`, bounded by
        /// `max_retry_after_hold`).
        hold: Duration,
    },
    /// Open → half-open: the open wait is over and a call came; it is the
    /// first probe.
    WaitElapsed,
    /// Changed by hand with [`Breaker::transition_to`](crate::Breaker::transition_to).
    Manual,
    /// Closed by hand with [`Breaker::reset`](crate::Breaker::reset).
    Reset,
}

impl TransitionReason {
    /// `(rate, threshold, calls, hold in ms)` as log fields, when they apply.
    #[cfg(feature = "tracing")]
    pub(crate) fn fields(&self) -> (Option<f32>, Option<f32>, Option<u32>, Option<u64>) {
        match *self {
            TransitionReason::FailureRate {
                rate,
                threshold,
                calls,
            }
            | TransitionReason::SlowCallRate {
                rate,
                threshold,
                calls,
            } => (Some(rate), Some(threshold), Some(calls), None),
            TransitionReason::ProbesFailed {
                failure_rate,
                failure_rate_threshold,
                calls,
                ..
            } => (
                Some(failure_rate),
                Some(failure_rate_threshold),
                Some(calls),
                None,
            ),
            TransitionReason::ProbesSucceeded { calls } => (None, None, Some(calls), None),
            TransitionReason::RetryAfter { hold } => (
                None,
                None,
                None,
                Some(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX)),
            ),
            TransitionReason::WaitElapsed | TransitionReason::Manual | TransitionReason::Reset => {
                (None, None, None, None)
            }
        }
    }
}

impl fmt::Display for TransitionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: u32| if n == 1 { "" } else { "s" };
        match *self {
            TransitionReason::FailureRate {
                rate,
                threshold,
                calls,
            } => write!(
                f,
                "failure rate {rate:.1} % over {calls} call{} >= threshold {threshold} %",
                plural(calls)
            ),
            TransitionReason::SlowCallRate {
                rate,
                threshold,
                calls,
            } => write!(
                f,
                "slow-call rate {rate:.1} % over {calls} call{} >= threshold {threshold} %",
                plural(calls)
            ),
            TransitionReason::ProbesFailed {
                failure_rate,
                failure_rate_threshold,
                slow_call_rate,
                slow_call_rate_threshold,
                calls,
            } => {
                write!(f, "half-open probes failed: ")?;
                if failure_rate >= failure_rate_threshold {
                    write!(
                        f,
                        "failure rate {failure_rate:.1} % over {calls} probe{} >= threshold {failure_rate_threshold} %",
                        plural(calls)
                    )
                } else {
                    write!(
                        f,
                        "slow-call rate {slow_call_rate:.1} % over {calls} probe{} >= threshold {slow_call_rate_threshold} %",
                        plural(calls)
                    )
                }
            }
            TransitionReason::ProbesSucceeded { calls } => write!(
                f,
                "half-open probes succeeded: {calls} probe{} below both thresholds",
                plural(calls)
            ),
            TransitionReason::RetryAfter { hold } => {
                write!(f, "held open by a Retry-After of {hold:?}")
            }
            TransitionReason::WaitElapsed => f.write_str("open wait elapsed; admitting probes"),
            TransitionReason::Manual => f.write_str("changed by hand (transition_to)"),
            TransitionReason::Reset => f.write_str("reset by hand"),
        }
    }
}

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
        /// Why.
        reason: TransitionReason,
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

type Callback = dyn Fn(&BreakerEvent) + Send + Sync;

struct Subscriber {
    id: u64,
    callback: Box<Callback>,
    /// Set at its first panic, which is the one reported.
    panicked: AtomicBool,
}

/// What the delivery thread reads: the subscribers.
struct Shared {
    subscribers: RwLock<Vec<Arc<Subscriber>>>,
    /// Events in the queue (counted before they are sent, uncounted when
    /// received or not sent): what decides that a rejection is dropped to
    /// keep room for transitions.
    queued: Places,
}

enum Message {
    Event(BreakerEvent),
    /// A transition and the rates it reports (those first), delivered one
    /// after the other with nothing between them.
    Transition([Option<BreakerEvent>; 3]),
    /// Answered once every message queued before it has been handled.
    Flush(SyncSender<()>),
}

/// Delivers breaker events to subscribers, off the callers' path (see the
/// module documentation for the guarantees). The breakers of one registry
/// share one hub.
///
/// Costs one relaxed load per would-be event while nobody subscribes; events
/// come from transitions and rejections, never from a call that succeeds in a
/// closed breaker.
pub struct EventHub {
    anyone: AtomicBool,
    next_id: AtomicU64,
    dropped: AtomicU64,
    shared: Arc<Shared>,
    /// The queue to the delivery thread, made at the first subscription;
    /// `None` if the thread could not be spawned (events are then dropped
    /// and counted: never delivered on a caller's thread, where a slow
    /// subscriber would hold the call, and one that changes the breaker's
    /// state would wait on the lock that orders its transitions).
    queue: OnceLock<Option<SyncSender<Message>>>,
}

impl fmt::Debug for EventHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self
            .shared
            .subscribers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("EventHub")
            .field("subscribers", &count)
            .field("queued", &self.shared.queued.taken())
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .finish()
    }
}

/// Runs `f` on the delivery thread, containing its panic: `true` if it
/// panicked. The panic's payload is someone else's value too, and its
/// drop may panic again: that is contained as well (review 37: it ended
/// the delivery thread, and every later event was lost), and that second
/// payload is leaked rather than dropped.
fn contained(f: impl FnOnce()) -> bool {
    let Err(payload) = catch_unwind(AssertUnwindSafe(f)) else {
        return false;
    };
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
    true
}

impl Shared {
    fn deliver(&self, event: &BreakerEvent) {
        // Cloned out of the lock: no lock is held while a subscriber runs, so
        // it may subscribe or unsubscribe from inside its callback.
        let subscribers: Vec<Arc<Subscriber>> = self
            .subscribers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for s in subscribers {
            if contained(|| (s.callback)(event)) && !s.panicked.swap(true, Ordering::Relaxed) {
                // A tracing layer runs here: its panic is contained too.
                contained(|| {
                    #[cfg(feature = "tracing")]
                    tracing::error!(
                        subscription = s.id,
                        breaker = event.name(),
                        "resilient: a breaker event subscriber panicked; the panic was contained and the subscriber stays subscribed (later panics of it are not reported)"
                    );
                });
            }
        }
    }

    fn run(self: Arc<Self>, queue: Receiver<Message>) {
        while let Ok(message) = queue.recv() {
            match message {
                Message::Event(event) => {
                    self.queued.give_back(1);
                    self.deliver(&event);
                }
                Message::Transition(events) => {
                    let n = events.iter().flatten().count();
                    self.queued.give_back(n);
                    for event in events.iter().flatten() {
                        self.deliver(event);
                    }
                }
                Message::Flush(done) => {
                    self.queued.give_back(1);
                    let _ = done.try_send(());
                }
            }
        }
    }
}

impl EventHub {
    /// How many events may wait for delivery; beyond that, new events are
    /// dropped (and counted) rather than waited for. At one event per
    /// transition or rejection, 1 024 is seconds of a busy breaker's
    /// rejections: room for a subscriber that pauses, not for one that is
    /// stuck.
    pub const QUEUE_CAPACITY: usize = 1024;

    /// Of [`QUEUE_CAPACITY`](Self::QUEUE_CAPACITY), the places only a
    /// [`BreakerEvent::StateTransition`] and the rates it reports
    /// ([`FailureRateExceeded`](BreakerEvent::FailureRateExceeded),
    /// [`SlowCallRateExceeded`](BreakerEvent::SlowCallRateExceeded)) may
    /// take: rejections are dropped once the rest is full. A breaker makes
    /// few transitions (each open lasts its wait), so 256 is minutes of a
    /// flapping breaker's, while a flood of rejections cannot crowd out the
    /// one that says it closed, or why it opened.
    pub const RESERVED_FOR_TRANSITIONS: usize = 256;

    pub(crate) fn new() -> Arc<EventHub> {
        Arc::new(EventHub {
            anyone: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            shared: Arc::new(Shared {
                subscribers: RwLock::new(Vec::new()),
                queued: Places::new(),
            }),
            queue: OnceLock::new(),
        })
    }

    /// Calls `f` with every event of every breaker sharing this hub, until the
    /// returned [`Subscription`] is dropped. `f` runs on the hub's delivery
    /// thread, never on a caller's (see the module documentation).
    pub fn subscribe(
        self: &Arc<Self>,
        f: impl Fn(&BreakerEvent) + Send + Sync + 'static,
    ) -> Subscription {
        self.queue.get_or_init(|| {
            let (sender, receiver) = mpsc::sync_channel(Self::QUEUE_CAPACITY);
            let shared = Arc::clone(&self.shared);
            match std::thread::Builder::new()
                .name("resilient-breaker-events".into())
                .spawn(move || shared.run(receiver))
            {
                Ok(_) => Some(sender),
                Err(error) => {
                    #[cfg(feature = "tracing")]
                    tracing::warn!(
                        %error,
                        "resilient: the breaker events' delivery thread could not be started; events will be dropped and counted (Subscription::dropped_events)"
                    );
                    #[cfg(not(feature = "tracing"))]
                    let _ = error;
                    None
                }
            }
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut subscribers = self
            .shared
            .subscribers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.push(Arc::new(Subscriber {
            id,
            callback: Box::new(f),
            panicked: AtomicBool::new(false),
        }));
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

    /// Queues `event` for delivery. Never blocks, never allocates (the
    /// queue's slots are allocated when it is made; cloning an event clones
    /// an `Arc`).
    pub(crate) fn emit(&self, event: &BreakerEvent) {
        if self.emit_quietly(event) {
            Self::log_first_drop(event.name());
        }
    }

    /// [`emit`](Self::emit) without the log line of the hub's first drop:
    /// `true` when this was it, for the caller to log (with
    /// [`log_first_drop`](Self::log_first_drop)) once it holds no lock: a
    /// tracing subscriber runs there, and may panic.
    pub(crate) fn emit_quietly(&self, event: &BreakerEvent) -> bool {
        if !self.is_observed() {
            return false;
        }
        match self.queue.get() {
            Some(Some(queue)) => match self.try_queue(queue, event) {
                Ok(()) => false,
                Err(()) => self.dropped.fetch_add(1, Ordering::Relaxed) == 0,
            },
            // No delivery thread (logged when it failed to start).
            Some(None) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
            None => false,
        }
    }

    /// Logs the hub's first dropped event (later drops are counted only).
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn log_first_drop(breaker: &str) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            breaker,
            capacity = Self::QUEUE_CAPACITY,
            "resilient: breaker events dropped: a subscriber is too slow to keep up (further drops are counted, not logged)"
        );
    }

    /// Queues a transition's events (the rates it reports, then the
    /// transition: the last one in `events`), as one message, so that
    /// nothing comes between them, in the places kept for transitions too.
    /// With no room for all of them, the rates are dropped and the
    /// transition alone takes a place if there is one: a rate never
    /// arrives without its transition, nor takes its place (reviews 34 and
    /// 36). Returns whether this was the hub's first drop, as
    /// [`emit_quietly`](Self::emit_quietly) does.
    pub(crate) fn emit_transition_quietly(&self, events: &[Option<BreakerEvent>; 3]) -> bool {
        let n = events.iter().flatten().count();
        if n == 0 || !self.is_observed() {
            return false;
        }
        let queue = match self.queue.get() {
            Some(Some(queue)) => queue,
            // No delivery thread (logged when it failed to start).
            Some(None) => {
                self.dropped.fetch_add(n as u64, Ordering::Relaxed);
                return false;
            }
            None => return false,
        };
        if self.try_queue_group(queue, events.clone(), n).is_ok() {
            return false;
        }
        let mut first_drop = self.count_dropped(n - 1);
        let mut alone: [Option<BreakerEvent>; 3] = Default::default();
        alone[2] = events.iter().flatten().last().cloned();
        if self.try_queue_group(queue, alone, 1).is_err() {
            first_drop |= self.count_dropped(1);
        }
        first_drop
    }

    /// Takes `n` places at once, all of them free, and sends `events` in
    /// them.
    fn try_queue_group(
        &self,
        queue: &SyncSender<Message>,
        events: [Option<BreakerEvent>; 3],
        n: usize,
    ) -> Result<(), ()> {
        self.send_in_places(queue, n, Self::QUEUE_CAPACITY, || {
            Message::Transition(events)
        })
        .map_err(drop)
    }

    /// Takes `n` places of the queue, if that leaves at most `limit` of
    /// them taken, and sends in them the message `make` makes (only once
    /// they are taken); gives them back if it is not sent. Counted before
    /// it is sent: the delivery thread uncounts a message when it receives
    /// it, which may be before `try_send` returns. The one way into the
    /// queue, for events, transitions and flushes alike.
    fn send_in_places(
        &self,
        queue: &SyncSender<Message>,
        n: usize,
        limit: usize,
        make: impl FnOnce() -> Message,
    ) -> Result<(), TrySendError<()>> {
        let queued = &self.shared.queued;
        if !queued.take(n, limit) {
            return Err(TrySendError::Full(()));
        }
        queue.try_send(make()).map_err(|error| {
            queued.give_back(n);
            match error {
                TrySendError::Full(_) => TrySendError::Full(()),
                TrySendError::Disconnected(_) => TrySendError::Disconnected(()),
            }
        })
    }

    /// Counts `n` dropped events: `true` if the first of the hub's drops
    /// was among them.
    fn count_dropped(&self, n: usize) -> bool {
        n > 0 && self.dropped.fetch_add(n as u64, Ordering::Relaxed) == 0
    }

    /// Queues `event` if there is room for it: a transition while the queue
    /// is not full, another event while the places reserved for
    /// transitions are free too (a rate goes with its transition:
    /// [`emit_transition_quietly`](Self::emit_transition_quietly)).
    fn try_queue(&self, queue: &SyncSender<Message>, event: &BreakerEvent) -> Result<(), ()> {
        let limit = match event {
            BreakerEvent::StateTransition { .. } => Self::QUEUE_CAPACITY,
            _ => Self::QUEUE_CAPACITY - Self::RESERVED_FOR_TRANSITIONS,
        };
        self.send_in_places(queue, 1, limit, || Message::Event(event.clone()))
            .map_err(drop)
    }

    /// Waits until every event queued before this call has been delivered,
    /// or `timeout` has passed; `true` if delivered.
    fn flush(&self, timeout: Duration) -> bool {
        let Some(Some(queue)) = self.queue.get() else {
            return true;
        };
        // `None`: a timeout past the end of the clock (`Duration::MAX`)
        // waits for as long as it takes (review 36: it panicked).
        let deadline = Instant::now().checked_add(timeout);
        let (done, delivered) = mpsc::sync_channel(1);
        // Counted in the queue, as a rejection is: it takes a place of the
        // channel, and never one of those kept for transitions (review 35:
        // a flush that timed out left its message in the last place, and
        // the transition after it was dropped).
        let limit = Self::QUEUE_CAPACITY - Self::RESERVED_FOR_TRANSITIONS;
        loop {
            match self.send_in_places(queue, 1, limit, || Message::Flush(done.clone())) {
                Ok(()) => break,
                Err(TrySendError::Full(())) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TrySendError::Disconnected(())) => return true,
            }
        }
        // Only the queued message's sender is left: a delivery thread that
        // drops it unanswered ends the wait below.
        drop(done);
        match deadline {
            Some(d) => delivered
                .recv_timeout(d.saturating_duration_since(Instant::now()))
                .is_ok(),
            None => delivered.recv().is_ok(),
        }
    }

    fn unsubscribe(&self, id: u64) {
        let mut subscribers = self
            .shared
            .subscribers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        subscribers.retain(|s| s.id != id);
        self.anyone
            .store(!subscribers.is_empty(), Ordering::Release);
    }
}

/// A subscription to breaker events; dropping it unsubscribes (events
/// already queued are no longer delivered to it).
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

impl Subscription {
    /// Blocks the calling thread until every event queued before this call
    /// (by any breaker sharing the hub) has been delivered, or `timeout` has
    /// passed; returns whether they were. Delivery is not synchronous with
    /// the calls (see [`EventHub`]); this is the way to wait for it, in tests
    /// or before shutting down. A subscriber that blocks makes it time out,
    /// and so does a call from inside a subscriber (it would wait for
    /// itself).
    pub fn flush(&self, timeout: Duration) -> bool {
        self.hub.upgrade().is_none_or(|hub| hub.flush(timeout))
    }

    /// How many events the hub has dropped because its queue was full (a
    /// subscriber too slow to keep up), since it was made.
    pub fn dropped_events(&self) -> u64 {
        self.hub
            .upgrade()
            .map_or(0, |hub| hub.dropped.load(Ordering::Relaxed))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.unsubscribe(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hub whose delivery thread could not be started drops its events
    /// (counted) rather than run subscribers on the caller's thread.
    #[test]
    fn without_a_delivery_thread_events_are_dropped_not_delivered_in_place() {
        let hub = EventHub::new();
        // As if spawning the thread had failed at the first subscription.
        assert!(hub.queue.set(None).is_ok());
        let caller = std::thread::current().id();
        let on_caller = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&on_caller);
        let subscription = hub.subscribe(move |_| {
            if std::thread::current().id() == caller {
                seen.store(true, Ordering::SeqCst);
            }
        });
        hub.emit(&BreakerEvent::CallNotPermitted {
            name: Arc::from("dep"),
        });
        assert!(
            !on_caller.load(Ordering::SeqCst),
            "a subscriber ran on the caller's thread"
        );
        assert_eq!(subscription.dropped_events(), 1);
        assert!(subscription.flush(Duration::from_millis(10)));
    }
}
