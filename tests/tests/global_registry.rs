//! The global registry: installed once at start-up, and refused once calls
//! have started. Its own test binary, since it is process-wide state.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilient::{BreakerConfig, Registry, SlidingWindow, State, resilient};

#[resilient(breaker = "global-dep")]
async fn call(fail: bool) -> Result<(), std::io::Error> {
    if fail {
        Err(std::io::ErrorKind::ConnectionReset.into())
    } else {
        Ok(())
    }
}

async fn cached(_error: std::io::Error) -> Result<u32, std::io::Error> {
    Ok(0)
}

/// Names no breaker, budget or bulkhead: it needs no registry.
#[resilient(fallback = cached)]
async fn warm_up() -> Result<u32, std::io::Error> {
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

/// Names a breaker the lenient registry below does not configure.
#[resilient(breaker = "never-configured")]
async fn on_defaults() -> Result<(), std::io::Error> {
    Ok(())
}

/// The lines a `tracing` subscriber writes, kept.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_installed_registry_is_used_and_a_late_install_is_refused() {
    // A function without parts may run (and its fallback answer) before
    // the registry is installed: that does not make the default one.
    assert_eq!(warm_up().await.unwrap(), 0);
    let registry = Registry::builder()
        .breaker(
            "global-dep",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 2 })
                .minimum_number_of_calls(2)
                .wait_duration_in_open_state(Duration::from_secs(5)),
        )
        // A misspelt name: it configures nothing.
        .breaker("global-dpe", BreakerConfig::default())
        .build()
        .unwrap();
    // A lenient registry installs, and says at INFO which names get the
    // defaults and at WARN what it configures that no function names.
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::with_default(subscriber, || registry.install().unwrap());
    let logged = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let info = logged
        .lines()
        .find(|l| l.contains(" INFO ") && l.contains("get the defaults"))
        .unwrap_or_else(|| panic!("no INFO line on the defaults in:\n{logged}"));
    assert!(info.contains("breaker `never-configured`"), "{info}");
    assert!(info.contains("on_defaults"), "{info}");
    assert!(!info.contains("`global-dep`"), "{info}");
    let warn = logged
        .lines()
        .find(|l| l.contains(" WARN ") && l.contains("named by no annotated function"))
        .unwrap_or_else(|| panic!("no WARN line on unused parts in:\n{logged}"));
    assert!(warn.contains("breaker `global-dpe`"), "{warn}");
    assert!(!warn.contains("`global-dep`"), "{warn}");
    on_defaults().await.unwrap();
    // The fallback served before the install is counted in it.
    let fallbacks = Registry::global().snapshot().fallbacks;
    assert_eq!(fallbacks.len(), 1, "{fallbacks:?}");
    assert!(fallbacks[0].function.ends_with("warm_up"), "{fallbacks:?}");
    assert_eq!(fallbacks[0].served, 1);
    let _ = call(true).await;
    let _ = call(true).await;
    let breaker = Registry::global().breaker("global-dep").unwrap();
    assert_eq!(breaker.state(), State::Open);
    let refused = call(false).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::Other);

    let late = Registry::builder().build().unwrap().install();
    let err = late.unwrap_err();
    assert!(
        err.to_string().contains("before the first annotated call"),
        "{err}"
    );
}
