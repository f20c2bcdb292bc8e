//! Loom models of the graceful shutdown's admission protocol
//! (`runtime/src/shutdown/gate.rs`, compiled here against loom's atomics):
//! a call is either refused or seen by the drain, and a drain that found
//! calls in flight is always woken by one that ends after it counted.

mod sync {
    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
    }
}

#[path = "../../runtime/src/shutdown/gate.rs"]
#[allow(dead_code)]
mod gate;

use gate::Entered;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

struct Gate {
    shards: [AtomicUsize; 2],
}

impl Gate {
    fn new() -> Gate {
        Gate {
            shards: [AtomicUsize::new(0), AtomicUsize::new(0)],
        }
    }

    fn in_flight(&self) -> usize {
        gate::in_flight(self.shards.iter())
    }
}

/// A new call racing a drain: either the call is refused, or the drain
/// counts it for as long as it runs. A drain that counted zero never
/// coexists with an admitted call still running.
#[test]
fn a_call_racing_a_drain_is_refused_or_counted() {
    model(|| {
        let g = Arc::new(Gate::new());
        let running = Arc::new(AtomicBool::new(false));
        let call = {
            let (g, running) = (g.clone(), running.clone());
            thread::spawn(move || match gate::enter(&g.shards[0], false) {
                Entered::Admitted => {
                    running.store(true, Ordering::SeqCst);
                    running.store(false, Ordering::SeqCst);
                    gate::leave(&g.shards[0]);
                    true
                }
                Entered::Refused => false,
            })
        };
        gate::start_drain(g.shards.iter());
        if g.in_flight() == 0 {
            assert!(
                !running.load(Ordering::SeqCst),
                "the drain counted no call while an admitted one ran"
            );
        }
        let admitted = call.join().unwrap();
        assert_eq!(g.in_flight(), 0, "every call left the count");
        let _ = admitted;
    });
}

/// Two calls in flight end while a drain counts them: whenever the drain
/// found calls still counted, a wake-up comes after it registered for one
/// (registration happens before the count, as `drain` does with `Notify`).
#[test]
fn a_drain_that_found_calls_is_woken_by_one_that_ends_later() {
    model(|| {
        let g = Arc::new(Gate::new());
        let wakes = Arc::new(AtomicUsize::new(0));
        for shard in &g.shards {
            assert_eq!(
                gate::enter(shard, false),
                Entered::Admitted,
                "admitted before the drain"
            );
        }
        let calls: Vec<_> = (0..2)
            .map(|i| {
                let (g, wakes) = (g.clone(), wakes.clone());
                thread::spawn(move || {
                    if gate::leave(&g.shards[i]) {
                        wakes.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        gate::start_drain(g.shards.iter());
        let registered = wakes.load(Ordering::SeqCst);
        let found = g.in_flight();
        for c in calls {
            c.join().unwrap();
        }
        if found > 0 {
            assert!(
                wakes.load(Ordering::SeqCst) > registered,
                "the drain found {found} call(s) and was never woken"
            );
        }
        assert_eq!(g.in_flight(), 0);
    });
}

/// A call nested in admitted work is admitted while draining (and counted),
/// a new one refused and not counted; after a resume, new calls are
/// admitted again and their end wakes nobody.
#[test]
fn while_draining_nested_calls_are_admitted_and_new_ones_refused() {
    model(|| {
        let g = Gate::new();
        gate::start_drain(g.shards.iter());
        assert_eq!(gate::enter(&g.shards[0], true), Entered::Admitted);
        assert_eq!(gate::enter(&g.shards[1], false), Entered::Refused);
        assert_eq!(g.in_flight(), 1);
        assert!(gate::leave(&g.shards[0]));
        gate::resume(g.shards.iter());
        assert_eq!(
            gate::enter(&g.shards[1], false),
            Entered::Admitted,
            "admitted again after resume"
        );
        assert!(!gate::leave(&g.shards[1]));
        assert_eq!(g.in_flight(), 0);
    });
}
