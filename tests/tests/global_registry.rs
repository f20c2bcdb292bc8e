//! The global registry: installed once at start-up, and refused once calls
//! have started. Its own test binary, since it is process-wide state.

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

#[tokio::test(start_paused = true)]
async fn the_installed_registry_is_used_and_a_late_install_is_refused() {
    // A function without parts may run (and its fallback answer) before
    // the registry is installed: that does not make the default one.
    assert_eq!(warm_up().await.unwrap(), 0);
    Registry::builder()
        .breaker(
            "global-dep",
            BreakerConfig::default()
                .sliding_window(SlidingWindow::CountBased { size: 2 })
                .minimum_number_of_calls(2)
                .wait_duration_in_open_state(Duration::from_secs(5)),
        )
        .build()
        .unwrap()
        .install()
        .unwrap();
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
