// `self: Arc<Self>` with `retries` in the places a rename of `self` could
// miss: next to a function pointer type (not a nested function), in the
// messages of `assert!`, `assert_eq!` and `tracing::event!` (after their
// leading arguments), and a string operand that merely looks like one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use resilient::resilient;

#[derive(Debug)]
struct Svc {
    x: u32,
    attempts: AtomicU32,
}

fn inc(n: u32) -> u32 {
    n + 1
}

struct Holder {
    f: fn(u32) -> u32,
    v: u32,
}

impl Svc {
    #[resilient(retries = 2, idempotent, base_ms = 1)]
    async fn run(self: Arc<Self>) -> Result<u32, std::io::Error> {
        let n = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        if n < 3 {
            return Err(std::io::ErrorKind::ConnectionReset.into());
        }
        let apply = |g: fn(u32) -> u32| g(self.x);
        let held = Holder {
            f: inc as fn(u32) -> u32,
            v: self.x,
        };
        assert_eq!(self.x, 1, "bad {self:?}");
        assert!(self.x == 1, "bad {self:?}");
        assert_eq!("{self}", "{self}", "operands are not format strings");
        tracing::event!(tracing::Level::DEBUG, "svc {self:?}");
        Ok(apply(inc) + (held.f)(held.v) + n)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let svc = Arc::new(Svc {
        x: 1,
        attempts: AtomicU32::new(0),
    });
    assert_eq!(svc.clone().run().await.unwrap(), 2 + 2 + 3);
    assert_eq!(Arc::strong_count(&svc), 1);
}
