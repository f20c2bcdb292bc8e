// Parameters compiled in or out with `#[cfg(…)]` are copied for each
// attempt and passed to the fallback under the same condition (found from
// outside: a parameter compiled out was still copied, E0425).

use resilient::resilient;

#[resilient(retries = 2, idempotent, base_ms = 1)]
async fn retried(
    #[cfg(any())] debug: bool,
    n: u32,
    #[cfg(all())] m: u32,
    #[cfg(any())] (a, b): (u32, u32),
    // A `cfg_attr` that makes a `cfg` compiles the parameter out too
    // (review 40: it was still copied, E0425).
    #[cfg_attr(all(), cfg(any()))] trace: bool,
    // Through nested `cfg_attr`s too (review 44: E0425).
    #[cfg_attr(all(), cfg_attr(all(), cfg(any())))] label: &str,
) -> Result<u32, std::io::Error> {
    Ok(n + m)
}

async fn stale(
    #[cfg(any())] debug: bool,
    n: u32,
    #[cfg(all())] m: u32,
    _error: std::io::Error,
) -> Result<u32, std::io::Error> {
    Ok(n * m)
}

#[resilient(fallback = stale)]
async fn with_fallback(
    #[cfg(any())] debug: bool,
    n: u32,
    #[cfg(all())] m: u32,
) -> Result<u32, std::io::Error> {
    let _ = (n, m);
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(retried(1, 2).await.unwrap(), 3);
    let registry = resilient::Registry::builder().build().unwrap();
    assert_eq!(registry.scope(with_fallback(3, 4)).await.unwrap(), 12);
}
