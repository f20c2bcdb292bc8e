//! Loom models of the overload-control cores: the bulkhead's slot counter,
//! the token bucket, and the sliding window behind ratio budgets and
//! adaptive throttling. The files are the ones that ship, compiled against
//! loom's atomics through the `sync` shim below.
//!
//! Every model is two or three threads doing one or two operations each, so
//! that loom can explore every interleaving in seconds.

mod sync {
    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    }
}

#[path = "../../runtime/src/modulo.rs"]
mod modulo;

#[path = "../../runtime/src/bulkhead/core.rs"]
#[allow(dead_code)]
mod bulkhead_core;

#[path = "../../runtime/src/budget/tokens.rs"]
#[allow(dead_code)]
mod tokens;

#[path = "../../runtime/src/budget/window.rs"]
#[allow(dead_code)]
mod window;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use bulkhead_core::Slots;
use tokens::{MILLI, Tokens};
use window::{FIRST, SECOND, Window};

/// Two callers race for one slot: the count never exceeds the maximum,
/// never two callers hold the slot at once, and it returns to zero.
#[test]
fn bulkhead_count_never_exceeds_max_and_returns_to_zero() {
    loom::model(|| {
        let slots = Arc::new(Slots::new(1));
        let holders = Arc::new(AtomicUsize::new(0));
        let call = {
            let slots = slots.clone();
            let holders = holders.clone();
            move || {
                if slots.try_acquire() {
                    let held = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    assert_eq!(held, 1, "two callers hold the only slot");
                    assert_eq!(slots.in_flight(), 1);
                    holders.fetch_sub(1, Ordering::SeqCst);
                    slots.release();
                }
            }
        };
        let other = thread::spawn(call.clone());
        call();
        other.join().unwrap();
        assert_eq!(slots.in_flight(), 0);
    });
}

/// A refusal happens only when every slot is taken at that moment.
#[test]
fn bulkhead_refuses_only_when_full() {
    loom::model(|| {
        let slots = Arc::new(Slots::new(1));
        let other = {
            let slots = slots.clone();
            thread::spawn(move || {
                if slots.try_acquire() {
                    slots.release();
                }
            })
        };
        // This thread holds no slot: if it is refused, the other one must
        // have held the only slot (its release comes after).
        let got = slots.try_acquire();
        if got {
            slots.release();
        }
        other.join().unwrap();
        assert_eq!(slots.in_flight(), 0);
    });
}

/// Two failures on a one-token bucket meet the floor together: the count
/// stops at zero, it does not wrap.
#[test]
fn token_bucket_never_goes_below_zero() {
    loom::model(|| {
        let bucket = Arc::new(Tokens::new(MILLI, 100));
        let other = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.on_failure())
        };
        bucket.on_failure();
        other.join().unwrap();
        assert_eq!(bucket.milli(), 0);
    });
}

/// A failure and a success race on a bucket below its maximum: both
/// count, exactly once (9 - 1 + 0.1 = 8.1 tokens).
#[test]
fn token_bucket_is_exactly_accounted() {
    loom::model(|| {
        let bucket = Arc::new(Tokens::new(10 * MILLI, 100));
        bucket.on_failure();
        let other = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.on_failure())
        };
        bucket.on_success();
        other.join().unwrap();
        assert_eq!(bucket.milli(), 8 * MILLI + 100);
    });
}

/// A success and a failure race on a full bucket: the success is clamped
/// at the maximum if it comes first (9.0 left), counts if it comes second
/// (9.1 left), and the count never exceeds the maximum meanwhile.
#[test]
fn token_bucket_never_exceeds_max() {
    loom::model(|| {
        let max = 10 * MILLI;
        let bucket = Arc::new(Tokens::new(max, 100));
        let other = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                bucket.on_success();
                assert!(bucket.milli() <= max);
            })
        };
        bucket.on_failure();
        assert!(bucket.milli() <= max);
        other.join().unwrap();
        let left = bucket.milli();
        assert!(
            left == 9 * MILLI || left == 9 * MILLI + 100,
            "{left} thousandths left"
        );
    });
}

/// A window of two one-nanosecond slots holding an event of epoch 0 (slot
/// 0) and one of epoch 1 (slot 1).
fn two_slot_window() -> Arc<Window> {
    let window = Arc::new(Window::new(1, 2));
    window.add(0, FIRST);
    window.add(1, SECOND);
    window
}

/// After every thread is done, the running totals equal what the slots
/// hold: no slot's counts were subtracted twice or never.
fn assert_exactly_accounted(window: &Window) {
    for which in [FIRST, SECOND] {
        assert_eq!(
            window.raw_total(which),
            window.slot_sum(which),
            "count {which}"
        );
    }
}

/// Two threads reach epoch 2 together, one counting an event, one reading:
/// both find slot 0 stale and race to empty it. Exactly one does, so the
/// epoch-0 event leaves the totals once (twice would wrap them). The new
/// event may be emptied with it if it lands first, the imprecision
/// `window.rs` accepts; it is never counted twice.
#[test]
fn window_rotation_of_one_slot_happens_exactly_once() {
    loom::model(|| {
        let window = two_slot_window();
        let other = {
            let window = window.clone();
            thread::spawn(move || window.add(2, FIRST))
        };
        let (first, second) = window.totals(2);
        assert!(first <= 2 && second == 1, "read ({first}, {second})");
        other.join().unwrap();
        assert_exactly_accounted(&window);
        let (first, second) = window.totals(2);
        assert!(first <= 1 && second == 1, "after: ({first}, {second})");
    });
}

/// A thread at epoch 2 and a thread at epoch 3 rotate overlapping sets of
/// slots (slot 0 to epoch 2, slot 1 to epoch 3) concurrently; afterwards
/// both old events are gone, exactly once each.
#[test]
fn window_concurrent_rotations_account_exactly_once() {
    loom::model(|| {
        let window = two_slot_window();
        let other = {
            let window = window.clone();
            thread::spawn(move || window.add(2, FIRST))
        };
        window.add(3, SECOND);
        other.join().unwrap();
        assert_exactly_accounted(&window);
        let (first, second) = window.totals(3);
        assert!(
            first <= 1 && second <= 1,
            "old events still counted: ({first}, {second})"
        );
    });
}

/// Two threads ask for a retry that the window allows only once: the check
/// and the count are one step, so exactly one is granted.
#[test]
fn window_try_add_grants_a_limit_once() {
    loom::model(|| {
        let window = Arc::new(Window::new(1, 2));
        window.add(0, FIRST);
        let limit = |_requests: u64, retries: u64| retries < 1;
        let other = {
            let window = window.clone();
            thread::spawn(move || window.try_add(0, SECOND, limit))
        };
        let mine = window.try_add(0, SECOND, limit);
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "granted: {mine} and {theirs}");
        assert_eq!(window.totals(0), (1, 1));
    });
}

/// A retry granted and given back while another thread counts one in the
/// same slot: the window ends holding exactly the other thread's retry, in
/// its totals and its slots.
#[test]
fn window_remove_takes_back_exactly_one_event() {
    loom::model(|| {
        let window = Arc::new(Window::new(1, 2));
        window.add(0, FIRST);
        let other = {
            let window = window.clone();
            thread::spawn(move || window.add(0, SECOND))
        };
        assert!(window.try_add(0, SECOND, |_, _| true));
        window.remove(0, SECOND);
        other.join().unwrap();
        assert_exactly_accounted(&window);
        assert_eq!(window.totals(0), (1, 1));
    });
}

/// A retry given back while another thread, a whole window later, empties
/// its slot: the retry leaves the totals once (taken back, or emptied with
/// its slot), never twice.
#[test]
fn window_remove_racing_the_rotation_of_its_slot_takes_nothing_twice() {
    loom::model(|| {
        let window = Arc::new(Window::new(1, 2));
        assert!(window.try_add(0, SECOND, |_, _| true));
        let other = {
            let window = window.clone();
            thread::spawn(move || window.add(2, FIRST))
        };
        window.remove(0, SECOND);
        other.join().unwrap();
        assert_exactly_accounted(&window);
        let (first, second) = window.totals(2);
        // The new epoch's event may have been taken in the retry's place
        // (it leaves early); a count taken twice would wrap below zero.
        assert!(first <= 1 && second == 0, "({first}, {second})");
    });
}

/// Adaptive throttling counts a request the backend accepted as a pair
/// (`AdaptiveThrottle::record` calls `add_pair`): a reader racing the
/// count never sees the request without its accept, which it would read as
/// a refusal (`requests > accepts` on a healthy backend: shed with
/// probability 1/2 on a young window; review 27).
#[test]
fn window_a_pair_is_never_read_half_counted() {
    loom::model(|| {
        let window = Arc::new(Window::new(1_000, 2));
        let other = {
            let window = window.clone();
            thread::spawn(move || window.add_pair(0, true))
        };
        let (first, second) = window.totals(0);
        assert!(first <= second, "read ({first}, {second})");
        other.join().unwrap();
        assert_eq!(window.totals(0), (1, 1));
    });
}

/// The same while the pair's slot rotates out: one thread's `totals` empties
/// the slot (requests, then accepts) while another reads, and the reader
/// still never sees the request without its accept (review 30).
#[test]
fn window_a_pair_rotating_out_is_never_read_half_counted() {
    loom::model(|| {
        let window = Arc::new(Window::new(1_000, 2));
        window.add_pair(0, true);
        let other = {
            let window = window.clone();
            thread::spawn(move || window.totals(2_000))
        };
        let (first, second) = window.totals(2_000);
        assert!(first <= second, "read ({first}, {second})");
        other.join().unwrap();
        assert_eq!(window.totals(2_000), (0, 0));
    });
}
