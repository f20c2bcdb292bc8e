// Send-ness passes through faithfully: a body holding an `Rc` across an
// `.await` makes the generated future `!Send`, and rustc says why, in the
// user's body.

use std::rc::Rc;

use resilient::resilient;

fn assert_send<T: Send>(_: T) {}

#[resilient(retries = 2, idempotent)]
async fn retried() -> Result<u32, std::io::Error> {
    let shared = Rc::new(1);
    tokio::task::yield_now().await;
    Ok(*shared)
}

#[resilient(deadline_ms = 100)]
async fn once() -> Result<u32, std::io::Error> {
    let shared = Rc::new(1);
    tokio::task::yield_now().await;
    Ok(*shared)
}

fn main() {
    assert_send(retried());
    assert_send(once());
}
