//! The overload window checked against a model of what it should count.
//! Kept apart from `window.rs`, which the loom models compile as it ships:
//! these tests use plain atomics, outside any loom model.

use super::window::{FIRST, SECOND, Window};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// On one thread the window counts exactly the events of its last
    /// `slots` epochs, at any uptime and with clocks that step back a
    /// little (threads read the time before they count): an event older
    /// than the window counts in the epoch its slot holds, the one
    /// inside the window congruent to it.
    #[test]
    fn counts_the_events_of_its_last_epochs(
        width in 1u64..1_000,
        slots in 1usize..13,
        start in prop_oneof![
            Just(0u64),
            // Epochs about to pass 2^32, where the remainder stops
            // being computed by multiplications.
            Just((u64::from(u32::MAX) - 20) * 1_000),
            0u64..1 << 52,
        ],
        steps in proptest::collection::vec((-3_000i64..8_000, any::<bool>()), 1..150),
    ) {
        let window = Window::new(width, slots);
        let n = slots as u64;
        let mut now = start;
        // The model: the latest epoch, and each event's epoch.
        let mut head = 0u64;
        let mut events: Vec<(u64, usize)> = Vec::new();
        for (step, second) in steps {
            now = now.saturating_add_signed(step);
            let which = if second { SECOND } else { FIRST };
            window.add(now, which);
            let epoch = now / width;
            head = head.max(epoch);
            let counted_in = if epoch + n > head {
                epoch
            } else {
                head - (head - epoch) % n
            };
            events.push((counted_in, which));
            let count = |which| {
                events
                    .iter()
                    .filter(|&&(e, w)| w == which && e + n > head)
                    .count() as u64
            };
            prop_assert_eq!(window.totals(now), (count(FIRST), count(SECOND)));
        }
    }
}
