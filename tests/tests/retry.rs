//! Behaviour of the retry core through the `#[resilient]` attribute, on
//! tokio's paused clock and a seeded jitter generator.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::{Classification, Classify, ErrorKind, IdempotencyKey, resilient};
use tokio::time::Instant;

#[derive(Debug)]
enum TestError {
    Transient,
    Permanent,
    Throttled(Duration),
    Resilience(resilient::Error),
}

impl From<resilient::Error> for TestError {
    fn from(e: resilient::Error) -> Self {
        TestError::Resilience(e)
    }
}

impl Classify for TestError {
    fn classify(&self) -> Classification {
        match self {
            TestError::Transient => Classification::Transient,
            TestError::Permanent => Classification::Permanent,
            TestError::Throttled(d) => Classification::Throttled {
                retry_after: Some(*d),
            },
            TestError::Resilience(e) => e.classify(),
        }
    }
}

/// A fake dependency: fails with the scripted errors, then succeeds, and
/// records when each attempt started.
#[derive(Clone, Default)]
struct Dependency {
    script: Arc<Mutex<Vec<TestError>>>,
    attempts: Arc<Mutex<Vec<Instant>>>,
    hang: Arc<Mutex<Option<Duration>>>,
}

impl Dependency {
    fn failing_with(errors: Vec<TestError>) -> Self {
        let d = Dependency::default();
        *d.script.lock().unwrap() = errors.into_iter().rev().collect();
        d
    }

    fn always_failing() -> Self {
        Self::failing_with((0..100).map(|_| TestError::Transient).collect())
    }

    async fn call(&self) -> Result<u32, TestError> {
        self.attempts.lock().unwrap().push(Instant::now());
        let hang = *self.hang.lock().unwrap();
        if let Some(h) = hang {
            tokio::time::sleep(h).await;
        }
        let next = self.script.lock().unwrap().pop();
        match next {
            Some(e) => Err(e),
            None => Ok(self.attempts() as u32),
        }
    }

    fn attempts(&self) -> usize {
        self.attempts.lock().unwrap().len()
    }

    fn gaps(&self) -> Vec<Duration> {
        let a = self.attempts.lock().unwrap();
        a.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

#[resilient(
    retries = 3,
    idempotent,
    backoff = "exponential",
    base_ms = 100,
    cap_ms = 1000
)]
async fn fetch(dep: &Dependency) -> Result<u32, TestError> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn transient_failures_are_retried_until_success() {
    let dep = Dependency::failing_with(vec![TestError::Transient, TestError::Transient]);
    assert_eq!(fetch(&dep).await.unwrap(), 3);
    assert_eq!(dep.attempts(), 3);
    assert_eq!(
        dep.gaps(),
        [Duration::from_millis(100), Duration::from_millis(200)]
    );
}

#[tokio::test(start_paused = true)]
async fn attempts_are_capped_at_retries_plus_one() {
    let dep = Dependency::always_failing();
    assert!(matches!(fetch(&dep).await, Err(TestError::Transient)));
    assert_eq!(dep.attempts(), 4);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_not_retried() {
    let dep = Dependency::failing_with(vec![TestError::Permanent]);
    assert!(matches!(fetch(&dep).await, Err(TestError::Permanent)));
    assert_eq!(dep.attempts(), 1);
}

#[resilient(retries = 2, idempotent)]
async fn throttled(dep: &Dependency) -> Result<u32, TestError> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn throttled_errors_wait_at_least_their_retry_after() {
    let dep = Dependency::failing_with(vec![
        TestError::Throttled(Duration::from_secs(5)),
        TestError::Throttled(Duration::from_secs(7)),
    ]);
    assert_eq!(throttled(&dep).await.unwrap(), 3);
    let gaps = dep.gaps();
    assert!(gaps[0] >= Duration::from_secs(5), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_secs(7), "{gaps:?}");
}

#[resilient(retries = 2, idempotent, deadline_ms = 3000)]
async fn throttled_with_deadline(dep: &Dependency) -> Result<u32, TestError> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn retry_after_past_the_deadline_gives_up_at_once() {
    let dep = Dependency::failing_with(vec![TestError::Throttled(Duration::from_secs(5))]);
    let start = Instant::now();
    let result = throttled_with_deadline(&dep).await;
    assert!(matches!(result, Err(TestError::Throttled(_))), "{result:?}");
    assert_eq!(dep.attempts(), 1);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[resilient(
    retries = 5,
    idempotent,
    deadline_ms = 1000,
    backoff = "exponential",
    base_ms = 300
)]
async fn bounded(dep: &Dependency) -> Result<u32, TestError> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn deadline_stops_retries_and_cuts_sleeps() {
    let dep = Dependency::always_failing();
    let start = Instant::now();
    let result = bounded(&dep).await;
    // Attempts at 0, 300 and 900 ms; the next sleep (1200 ms) would end past
    // the 1 s deadline, so the call returns the last error at once.
    assert!(matches!(result, Err(TestError::Transient)));
    assert_eq!(dep.attempts(), 3);
    assert_eq!(start.elapsed(), Duration::from_millis(900));
}

#[resilient(deadline_ms = 1000)]
async fn hangs_under_deadline(dep: &Dependency) -> Result<u32, TestError> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn deadline_cancels_a_hanging_attempt() {
    let dep = Dependency::default();
    *dep.hang.lock().unwrap() = Some(Duration::from_secs(60));
    let start = Instant::now();
    match hangs_under_deadline(&dep).await {
        Err(TestError::Resilience(e)) => assert_eq!(e.kind(), ErrorKind::DeadlineExceeded),
        other => panic!("expected deadline exceeded, got {other:?}"),
    }
    assert_eq!(start.elapsed(), Duration::from_millis(1000));
}

#[resilient(deadline_ms = 500)]
async fn outer_with_deadline(dep: &Dependency) -> Result<Option<Duration>, TestError> {
    inner_with_long_deadline(dep).await
}

#[resilient(deadline_ms = 10000)]
async fn inner_with_long_deadline(_dep: &Dependency) -> Result<Option<Duration>, TestError> {
    Ok(resilient::remaining())
}

#[tokio::test(start_paused = true)]
async fn nested_deadline_is_the_minimum() {
    let dep = Dependency::default();
    let remaining = outer_with_deadline(&dep).await.unwrap();
    assert_eq!(remaining, Some(Duration::from_millis(500)));
    // And the other way round: a shorter inner deadline wins inside.
    let inner = resilient::with_deadline(Duration::from_secs(60), async {
        outer_with_deadline(&dep).await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(inner, Some(Duration::from_millis(500)));
}

#[resilient(
    timeout_ms = 200,
    retries = 2,
    idempotent,
    backoff = "exponential",
    base_ms = 50
)]
async fn slow(dep: &Dependency) -> Result<u32, TestError> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn per_attempt_timeout_is_retried_then_reported() {
    let dep = Dependency::default();
    *dep.hang.lock().unwrap() = Some(Duration::from_secs(10));
    let start = Instant::now();
    match slow(&dep).await {
        Err(TestError::Resilience(e)) => {
            assert_eq!(e.kind(), ErrorKind::AttemptTimedOut);
            assert_eq!(e.timeout(), Some(Duration::from_millis(200)));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(dep.attempts(), 3);
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(200 + 50 + 200 + 100 + 200)
    );
}

#[resilient(timeout_ms = 200)]
async fn remaining_inside_attempt() -> Result<Option<Duration>, TestError> {
    Ok(resilient::remaining())
}

#[tokio::test(start_paused = true)]
async fn attempt_timeout_bounds_nested_deadline() {
    assert_eq!(
        remaining_inside_attempt().await.unwrap(),
        Some(Duration::from_millis(200))
    );
}

#[tokio::test(start_paused = true)]
async fn expired_inherited_deadline_runs_nothing() {
    let dep = Dependency::default();
    let out = resilient::with_deadline(Duration::from_millis(50), async {
        // Use up the whole budget without yielding to the outer timer.
        std::thread::sleep(Duration::ZERO);
        tokio::time::advance(Duration::from_millis(60)).await;
        fetch(&dep).await
    })
    .await;
    match out {
        Ok(Err(TestError::Resilience(e))) => assert!(e.is_deadline_exceeded()),
        Err(e) => assert!(e.is_deadline_exceeded()),
        other => panic!("expected deadline exceeded, got {other:?}"),
    }
    assert_eq!(dep.attempts(), 0);
}

#[resilient(retries = 3)]
async fn charge(
    dep: &Dependency,
    key: IdempotencyKey,
    seen: Arc<Mutex<Vec<String>>>,
) -> Result<u32, TestError> {
    seen.lock().unwrap().push(key.to_string());
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn idempotency_key_is_the_same_on_every_attempt() {
    let dep = Dependency::failing_with(vec![TestError::Transient, TestError::Transient]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let key = IdempotencyKey::random();
    charge(&dep, key.clone(), seen.clone()).await.unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|k| *k == key.to_string()));
}

#[resilient(retries = 4, idempotent)]
async fn jittered(dep: &Dependency) -> Result<u32, TestError> {
    dep.call().await
}

#[tokio::test(start_paused = true)]
async fn seeded_jitter_gives_the_same_schedule() {
    async fn run(seed: u64) -> Vec<Duration> {
        resilient::seed_jitter(seed);
        let dep = Dependency::failing_with((0..4).map(|_| TestError::Transient).collect());
        jittered(&dep).await.unwrap();
        dep.gaps()
    }
    let a = run(1).await;
    let b = run(1).await;
    let c = run(2).await;
    assert_eq!(a, b);
    assert_ne!(a, c);
    for (n, gap) in a.iter().enumerate() {
        assert!(
            *gap <= Duration::from_millis(100) * 2u32.pow(n as u32),
            "{a:?}"
        );
    }
}

struct Service {
    dep: Dependency,
    calls: AtomicU32,
}

impl Service {
    #[resilient(retries = 1, idempotent)]
    async fn get(&self, n: u32) -> Result<u32, TestError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.dep.call().await.map(|v| v + n)
    }
}

#[tokio::test(start_paused = true)]
async fn methods_with_self_are_retried() {
    let s = Service {
        dep: Dependency::failing_with(vec![TestError::Transient]),
        calls: AtomicU32::new(0),
    };
    assert_eq!(s.get(10).await.unwrap(), 12);
    assert_eq!(s.calls.load(Ordering::SeqCst), 2);
}

impl Service {
    #[resilient(retries = 2, idempotent)]
    async fn get_shared(self: Arc<Self>, n: u32) -> Result<u32, TestError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.dep.call().await.map(|v| v + n)
    }
}

impl Service {
    /// Imports `self` of a module in its body, renders with its `self`.
    #[resilient(retries = 2, idempotent)]
    async fn render_shared(self: Arc<Self>) -> Result<String, TestError> {
        use std::fmt::{self, Write};
        let mut out = String::new();
        let n = self.dep.call().await?;
        write!(out, "{n}/{}", self.calls.load(Ordering::SeqCst))
            .map_err(|_: fmt::Error| TestError::Permanent)?;
        Ok(out)
    }
}

impl Service {
    /// Names its receiver in text, after a failing attempt.
    #[resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1)]
    async fn receiver_named(self: Arc<Self>) -> Result<String, TestError> {
        self.dep.call().await?;
        // An item of the body visible to its module only: `pub(self)`,
        // which clippy finds needless but rustc accepts.
        #[allow(clippy::needless_pub_self)]
        pub(self) const SEP: &str = " ";
        Ok(format!(
            "{}{SEP}{}",
            stringify!(self),
            stringify!(self.calls)
        ))
    }
}

/// The sum of the receiver's count and the dependency's answer, its
/// `self` used inside a labelled block and a field's block.
struct Parts {
    count: u32,
}

impl Service {
    #[resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1)]
    async fn in_blocks(self: Arc<Self>) -> Result<u32, TestError> {
        let n = self.dep.call().await?;
        let counted = 'read: {
            if self.calls.load(Ordering::SeqCst) > 100 {
                break 'read 0;
            }
            self.calls.load(Ordering::SeqCst)
        };
        let parts = Parts {
            count: { self.calls.load(Ordering::SeqCst) + counted },
        };
        Ok(parts.count + n)
    }
}

/// `self` in a labelled block (`'l: { … }`) or a field's block
/// (`Out { a: { … } }`) of an `Arc<Self>` method that retries is the
/// attempt's copy, as everywhere else in the body (helper audit,
/// 2026-11-27: taken for a `use` tree's group and left as it was, the
/// receiver was moved into the first attempt, and the method did not
/// compile).
#[tokio::test(start_paused = true)]
async fn self_in_a_labelled_block_or_a_fields_block_is_the_attempts_copy() {
    let s = Arc::new(Service {
        dep: Dependency::failing_with(vec![TestError::Transient]),
        calls: AtomicU32::new(3),
    });
    // The dependency answers with its count of attempts: 2.
    assert_eq!(s.clone().in_blocks().await.unwrap(), 3 + 3 + 2);
    assert_eq!(s.dep.attempts(), 2);
    assert_eq!(Arc::strong_count(&s), 1);
}

/// `stringify!(self)` in an `Arc<Self>` method that retries reads "self",
/// as without the attribute: the attempt's copy of the receiver is the
/// expansion's, not the user's text (review 40).
#[tokio::test(start_paused = true)]
async fn stringify_of_self_in_an_arc_self_method_reads_self() {
    let s = Arc::new(Service {
        dep: Dependency::failing_with(vec![TestError::Transient]),
        calls: AtomicU32::new(0),
    });
    assert_eq!(s.clone().receiver_named().await.unwrap(), "self self.calls");
    assert_eq!(s.dep.attempts(), 2);
}

/// A `use path::{self, …}` in the body of an `Arc<Self>` method that
/// retries compiles: its `self` is the module's, not renamed as the
/// method's is (review 40: "unresolved import").
#[tokio::test(start_paused = true)]
async fn a_use_of_a_modules_self_in_an_arc_self_method_compiles() {
    let s = Arc::new(Service {
        dep: Dependency::failing_with(vec![TestError::Transient]),
        calls: AtomicU32::new(4),
    });
    // The dependency answers with its count of attempts.
    assert_eq!(s.clone().render_shared().await.unwrap(), "2/4");
    assert_eq!(s.dep.attempts(), 2);
}

#[tokio::test(start_paused = true)]
async fn methods_with_arc_self_are_retried() {
    let s = Arc::new(Service {
        dep: Dependency::failing_with(vec![TestError::Transient, TestError::Transient]),
        calls: AtomicU32::new(0),
    });
    assert_eq!(Arc::clone(&s).get_shared(10).await.unwrap(), 13);
    assert_eq!(s.calls.load(Ordering::SeqCst), 3);
    assert_eq!(s.dep.attempts(), 3);
    // Each attempt's clone of the `Arc` is dropped with the attempt.
    assert_eq!(Arc::strong_count(&s), 1);
}

/// Pushes onto its argument through a `ref mut` pattern, failing the first
/// time: each attempt has its own copy.
#[resilient(retries = 1, idempotent, base_ms = 1, cap_ms = 1)]
async fn push_onto(ref mut items: Vec<u32>, fails: &AtomicU32) -> Result<usize, TestError> {
    items.push(1);
    if fails
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return Err(TestError::Transient);
    }
    Ok(items.len())
}

/// A `ref mut` argument pattern compiles under `retries` (review 40: the
/// copy it borrows was not mutable), and borrows each attempt's own copy.
#[tokio::test(start_paused = true)]
async fn a_ref_mut_argument_pattern_borrows_each_attempts_copy() {
    let fails = AtomicU32::new(1);
    assert_eq!(push_onto(vec![7], &fails).await.unwrap(), 2);
    assert_eq!(fails.load(Ordering::SeqCst), 0);
}

/// Functions made by a `macro_rules!` whose key type comes in as a
/// `$t:ty` fragment (an invisible group around the type).
macro_rules! keyed_charge {
    ($name:ident, $key:ty) => {
        /// Fails its first attempt; notes the key of each.
        #[resilient(retries = 2, base_ms = 1, cap_ms = 1)]
        async fn $name(key: $key, seen: &Mutex<Vec<String>>) -> Result<u32, TestError> {
            let mut keys = seen.lock().unwrap();
            keys.push(key.to_string());
            if keys.len() < 2 {
                Err(TestError::Transient)
            } else {
                Ok(1)
            }
        }
    };
}

keyed_charge!(charge_through_a_macro, &IdempotencyKey);

/// The key is recognised through the macro's fragment (review 40: "takes
/// no idempotency key"), and every attempt gets the same one.
#[tokio::test(start_paused = true)]
async fn a_key_type_from_a_macro_fragment_is_recognised() {
    let key = IdempotencyKey::random();
    let seen = Mutex::new(Vec::new());
    assert_eq!(charge_through_a_macro(&key, &seen).await.unwrap(), 1);
    assert_eq!(*seen.lock().unwrap(), vec![key.to_string(); 2]);
}

/// The usual boxed error, which is not `Send`.
type LocalError = Box<dyn std::error::Error>;

fn always_transient(_: &LocalError) -> Classification {
    Classification::Transient
}

/// Fails `fails` times with an error that is not `Send`, then answers.
#[resilient(retries = 2, idempotent, base_ms = 1, cap_ms = 1, classify = always_transient)]
async fn fails_locally(fails: &AtomicU32) -> Result<u32, LocalError> {
    tokio::task::yield_now().await;
    if fails
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return Err("down".into());
    }
    Ok(7)
}

/// The same error with parts (a breaker), retried or not: the engine's
/// other entries.
#[resilient(retries = 2, idempotent, breaker = "send-check", classify = always_transient)]
async fn fails_locally_with_parts(fails: &AtomicU32) -> Result<u32, LocalError> {
    fails_locally(fails).await
}

#[resilient(breaker = "send-check", classify = always_transient)]
async fn fails_once_with_parts(fails: &AtomicU32) -> Result<u32, LocalError> {
    fails_locally(fails).await
}

#[test]
fn generated_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let dep = Dependency::default();
    assert_send(&fetch(&dep));
    assert_send(&charge(&dep, IdempotencyKey::random(), Arc::default()));
    // A body that never holds its error across an `.await` is `Send`
    // whatever the error type, and so is its retry loop (review 40: the
    // failed attempt's error was held across the backoff's sleep).
    assert_send(&fails_locally(&AtomicU32::new(0)));
    assert_send(&fails_locally_with_parts(&AtomicU32::new(0)));
    assert_send(&fails_once_with_parts(&AtomicU32::new(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_call_with_an_error_that_is_not_send_spawns() {
    static FAILS: AtomicU32 = AtomicU32::new(1);
    let answer = tokio::spawn(async { fails_locally(&FAILS).await.map_err(|e| e.to_string()) })
        .await
        .unwrap();
    assert_eq!(answer, Ok(7));
    assert_eq!(FAILS.load(Ordering::SeqCst), 0);
}

/// A provider SDK's own key type, beside the library's.
mod sdk {
    #[derive(Clone, Debug)]
    pub(crate) struct IdempotencyKey(pub(crate) String);
}

use sdk::IdempotencyKey as SdkKey;

/// Takes the library's key and, imported under another name as the
/// compile error advises, an SDK's type also named `IdempotencyKey`.
#[resilient(retries = 1, base_ms = 1, cap_ms = 1)]
async fn charge_with_sdk_key(
    key: &IdempotencyKey,
    sdk_key: &SdkKey,
    dep: &Dependency,
) -> Result<String, TestError> {
    dep.call().await?;
    Ok(format!("{}/{}", key.as_str(), sdk_key.0))
}

/// The rename the key message advises (review 44) compiles, and the
/// function is retried under the library's key.
#[tokio::test(start_paused = true)]
async fn another_librarys_key_type_imported_under_another_name_is_accepted() {
    let dep = Dependency::failing_with(vec![TestError::Transient]);
    let key = IdempotencyKey::from_stable_id("k").unwrap();
    let sdk_key = SdkKey("s".to_owned());
    assert_eq!(
        charge_with_sdk_key(&key, &sdk_key, &dep).await.unwrap(),
        "k/s"
    );
    assert_eq!(dep.attempts(), 2);
}
