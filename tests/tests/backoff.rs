//! Every backoff strategy stays within its formula's bounds over many draws
//! ("Exponential Backoff And Jitter", AWS Architecture Blog), and really is
//! jittered where it should be.

use std::time::Duration;

use resilient::Backoff;

const BASE: Duration = Duration::from_millis(100);
const CAP: Duration = Duration::from_secs(3);
const DRAWS: usize = 2000;
const RETRIES: usize = 8;

fn ceiling(n: usize) -> Duration {
    (BASE * 2u32.pow(n as u32)).min(CAP)
}

/// Runs `DRAWS` schedules of `RETRIES` delays each.
fn schedules(backoff: Backoff) -> Vec<Vec<Duration>> {
    resilient::seed_jitter(0x5eed);
    (0..DRAWS)
        .map(|_| backoff.delays().take(RETRIES).collect())
        .collect()
}

#[test]
fn full_jitter_is_uniform_between_zero_and_the_exponential_ceiling() {
    let all = schedules(Backoff::full_jitter(BASE, CAP));
    for n in 0..RETRIES {
        let draws: Vec<_> = all.iter().map(|s| s[n]).collect();
        assert!(draws.iter().all(|d| *d <= ceiling(n)), "retry {n}");
        // Uniform on [0, t]: the mean is close to t/2 and the draws spread
        // over the whole range.
        let mean = draws.iter().sum::<Duration>() / DRAWS as u32;
        let t = ceiling(n);
        assert!(
            mean > t * 45 / 100 && mean < t * 55 / 100,
            "retry {n}: mean {mean:?} of {t:?}"
        );
        assert!(draws.iter().any(|d| *d < t / 10));
        assert!(draws.iter().any(|d| *d > t * 9 / 10));
    }
}

#[test]
fn equal_jitter_keeps_at_least_half_the_ceiling() {
    let all = schedules(Backoff::equal_jitter(BASE, CAP));
    for n in 0..RETRIES {
        let t = ceiling(n);
        let draws: Vec<_> = all.iter().map(|s| s[n]).collect();
        assert!(draws.iter().all(|d| *d >= t / 2 && *d <= t), "retry {n}");
        assert!(draws.iter().any(|d| *d < t * 6 / 10));
        assert!(draws.iter().any(|d| *d > t * 9 / 10));
    }
}

#[test]
fn decorrelated_jitter_grows_from_the_previous_delay() {
    let all = schedules(Backoff::decorrelated_jitter(BASE, CAP));
    for schedule in &all {
        let mut prev = BASE;
        for d in schedule {
            assert!(*d >= BASE.min(CAP) && *d <= CAP, "{schedule:?}");
            assert!(*d <= (prev * 3).min(CAP), "{schedule:?}");
            prev = *d;
        }
    }
    // Some schedules reach the cap within 8 retries, and delays vary.
    assert!(all.iter().any(|s| s.contains(&CAP)));
    assert!(
        all.iter()
            .map(|s| s[0])
            .collect::<std::collections::HashSet<_>>()
            .len()
            > 100
    );
}

#[test]
fn exponential_doubles_up_to_the_cap_without_jitter() {
    let all = schedules(Backoff::exponential(BASE, CAP));
    let expected: Vec<_> = (0..RETRIES).map(ceiling).collect();
    assert!(all.iter().all(|s| *s == expected));
    assert_eq!(expected[5], CAP);
}

#[test]
fn huge_retry_counts_saturate_at_the_cap() {
    let d = Backoff::exponential(BASE, CAP).delays().nth(200).unwrap();
    assert_eq!(d, CAP);
}

#[test]
fn the_default_is_full_jitter_100ms_30s() {
    let d = Backoff::default();
    assert_eq!(
        d,
        Backoff::full_jitter(Duration::from_millis(100), Duration::from_secs(30))
    );
}
