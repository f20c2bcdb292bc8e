// The generated future is `Send` when the body is, with and without retries,
// for free functions and methods: it can be spawned on a multi-threaded runtime.

use std::sync::{Arc, Mutex};

use resilient::{IdempotencyKey, resilient};

fn assert_send<T: Send>(_: T) {}

#[resilient(retries = 2, idempotent, deadline_ms = 1000, timeout_ms = 100)]
async fn retried(counter: Arc<Mutex<u32>>) -> Result<u32, std::io::Error> {
    let n = {
        let mut guard = counter.lock().unwrap();
        *guard += 1;
        *guard
    };
    tokio::task::yield_now().await;
    Ok(n)
}

#[resilient(deadline_ms = 1000)]
async fn once(name: &str) -> Result<usize, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(name.len())
}

#[resilient(retries = 2)]
async fn keyed(key: &IdempotencyKey) -> Result<String, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(key.to_string())
}

struct Service;

impl Service {
    #[resilient(retries = 1, idempotent)]
    async fn get(&self) -> Result<(), std::io::Error> {
        tokio::task::yield_now().await;
        Ok(())
    }
}

#[tokio::main]
async fn main() {
    let key = IdempotencyKey::random();
    assert_send(retried(Arc::default()));
    assert_send(once("x"));
    assert_send(keyed(&key));
    assert_send(Service.get());
    tokio::spawn(retried(Arc::default())).await.unwrap().unwrap();
}
