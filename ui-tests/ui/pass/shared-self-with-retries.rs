// `self` through a shared pointer (`Arc<Self>`, `Rc<Self>`, `Pin<Arc<Self>>`,
// `Pin<&Self>`) with `retries`: each attempt gets its own clone of the
// pointer, and the body sees `self` with the type it declared.

use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use resilient::resilient;

struct Client {
    attempts: AtomicU32,
}

fn helper(n: u32) -> u32 {
    n
}

impl Client {
    // Fails twice with a transient error, then answers the attempt count.
    fn attempt(&self) -> Result<u32, std::io::Error> {
        let n = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        if n < 3 {
            Err(std::io::ErrorKind::ConnectionReset.into())
        } else {
            Ok(n)
        }
    }

    #[resilient(retries = 2, idempotent, base_ms = 1)]
    async fn by_arc(self: Arc<Self>, offset: u32) -> Result<u32, std::io::Error> {
        // `self` is an `Arc<Client>` here, as declared: it can be cloned,
        // moved, passed on; `self::` paths still name the module.
        let shared: Arc<Client> = Arc::clone(&self);
        let n = shared.attempt()?;
        let _ = format!("{}", self.attempts.load(Ordering::SeqCst));
        // Captured by a format string too; `{{self}}` is no capture, and
        // other strings are left alone.
        let shown = format!("{self:p} {{self}} {}", "{self}");
        assert!(shown.ends_with(" {self} {self}"), "{shown}");
        Ok(self::helper(n) + offset)
    }

    #[resilient(retries = 2, idempotent, base_ms = 1)]
    async fn by_path(self: std::sync::Arc<Self>) -> Result<u32, std::io::Error> {
        // A nested function's own `self` is its own.
        struct Local(u32);
        impl Local {
            fn get(&self) -> u32 {
                self.0
            }
        }
        let n = self.attempt()?;
        Ok(Local(n).get())
    }

    #[resilient(retries = 2, idempotent, base_ms = 1)]
    async fn by_rc(self: Rc<Self>) -> Result<u32, std::io::Error> {
        self.attempt()
    }

    #[resilient(retries = 2, idempotent, base_ms = 1)]
    async fn by_pinned_arc(self: Pin<Arc<Self>>) -> Result<u32, std::io::Error> {
        self.attempt()
    }

    #[resilient(retries = 2, idempotent, base_ms = 1)]
    async fn by_pinned_ref(self: Pin<&Self>) -> Result<u32, std::io::Error> {
        self.attempt()
    }

    #[resilient(retries = 2, idempotent, base_ms = 1, fallback = Client::stale)]
    async fn with_fallback(self: Arc<Self>) -> Result<u32, std::io::Error> {
        Err(std::io::ErrorKind::ConnectionReset.into())
    }

    async fn stale(self: Arc<Self>, _error: std::io::Error) -> Result<u32, std::io::Error> {
        Ok(self.attempts.load(Ordering::SeqCst))
    }
}

fn client() -> Client {
    Client {
        attempts: AtomicU32::new(0),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Three attempts each: two failures, then success.
    assert_eq!(Arc::new(client()).by_arc(10).await.unwrap(), 13);
    assert_eq!(Arc::new(client()).by_path().await.unwrap(), 3);
    assert_eq!(Rc::new(client()).by_rc().await.unwrap(), 3);
    assert_eq!(Arc::pin(client()).by_pinned_arc().await.unwrap(), 3);
    let local = client();
    assert_eq!(Pin::new(&local).by_pinned_ref().await.unwrap(), 3);
    assert_eq!(Arc::new(client()).with_fallback().await.unwrap(), 0);
}
