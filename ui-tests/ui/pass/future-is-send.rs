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

// An argument that is `Send` but not `Sync`: the future holds the argument,
// not a reference to it (found from outside: it was not `Send`).
#[resilient(retries = 2, idempotent)]
async fn not_sync(cells: std::cell::RefCell<Vec<u8>>) -> Result<usize, std::io::Error> {
    tokio::task::yield_now().await;
    Ok(cells.borrow().len())
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
    assert_send(not_sync(std::cell::RefCell::new(vec![1])));
    tokio::spawn(not_sync(std::cell::RefCell::new(vec![1])))
        .await
        .unwrap()
        .unwrap();
    tokio::spawn(retried(Arc::default())).await.unwrap().unwrap();
}
