// A representative set of expansions compiles without a single warning.
// (trybuild runs rustc, not clippy: `tests/expansion_lints.rs` has clippy
// lint the same shapes, pedantic included.)
#![deny(warnings)]
#![deny(clippy::all)]

use resilient::{Classification, Classify, IdempotencyKey, resilient};

#[derive(Debug)]
pub enum PayError {
    Declined,
    Unavailable,
    Resilience(resilient::Error),
}

impl From<resilient::Error> for PayError {
    fn from(e: resilient::Error) -> Self {
        PayError::Resilience(e)
    }
}

impl Classify for PayError {
    fn classify(&self) -> Classification {
        match self {
            PayError::Declined => Classification::Permanent,
            PayError::Unavailable => Classification::Transient,
            PayError::Resilience(e) => e.classify(),
        }
    }
}

fn never(_: &PayError) -> Classification {
    Classification::Permanent
}

/// Documented, public, every key.
#[resilient(
    retries = 3,
    idempotent,
    deadline_ms = 2000,
    timeout_ms = 500,
    backoff = "decorrelated_jitter",
    base_ms = 50,
    cap_ms = 1000,
    classify = never,
    crate = "::resilient"
)]
pub async fn everything(amount: u64) -> Result<u64, PayError> {
    if amount == 0 {
        return Err(PayError::Declined);
    }
    Ok(amount)
}

#[resilient]
async fn bare() -> Result<(), PayError> {
    Ok(())
}

#[resilient(retries = 2)]
async fn keyed(key: IdempotencyKey, mut tries: u32, (a, b): (u32, u32)) -> Result<String, PayError> {
    tries += a + b;
    if tries > 100 {
        return Err(PayError::Unavailable);
    }
    Ok(format!("{key}/{tries}"))
}

#[resilient(retries = 1, idempotent)]
async fn generic<T: ToString + Clone + Send>(value: T) -> Result<String, PayError> {
    Ok(value.to_string())
}

struct Service {
    name: String,
}

impl Service {
    #[resilient(retries = 1, idempotent, timeout_ms = 100)]
    async fn name(&self, suffix: &str) -> Result<String, PayError> {
        Ok(format!("{}{suffix}", self.name))
    }

    #[resilient(retries = 1, idempotent)]
    async fn shared(self: std::sync::Arc<Self>) -> Result<usize, PayError> {
        Ok(self.name.len())
    }

    // The receiver unused: no warning the plain method would not give.
    #[resilient(retries = 1, idempotent)]
    async fn unused(self: std::sync::Arc<Self>) -> Result<(), PayError> {
        Ok(())
    }
}

trait Lookup {
    async fn lookup(&self, id: u32) -> Result<u32, PayError>;
}

impl Lookup for Service {
    #[resilient(retries = 1, idempotent)]
    async fn lookup(&self, id: u32) -> Result<u32, PayError> {
        Ok(id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let service = Service {
        name: "s".to_owned(),
    };
    assert_eq!(everything(1).await.unwrap(), 1);
    bare().await.unwrap();
    keyed(IdempotencyKey::random(), 0, (1, 2)).await.unwrap();
    assert_eq!(generic(1).await.unwrap(), "1");
    assert_eq!(service.name("!").await.unwrap(), "s!");
    assert_eq!(service.lookup(3).await.unwrap(), 3);
    let service = std::sync::Arc::new(service);
    assert_eq!(service.clone().shared().await.unwrap(), 1);
    service.unused().await.unwrap();
}
