// The expansion records each function's names at link time for
// `Registry::check_names`: a crate that forbids unsafe code still builds,
// with warnings denied, and the names are found.
#![forbid(unsafe_code)]
#![deny(warnings)]

use resilient::{Registry, resilient};

#[derive(Debug)]
struct E(resilient::Error);

impl From<resilient::Error> for E {
    fn from(e: resilient::Error) -> Self {
        E(e)
    }
}

impl resilient::Classify for E {
    fn classify(&self) -> resilient::Classification {
        self.0.classify()
    }
}

#[resilient(breaker = "ledger", budget = "ledger-retries", bulkhead = "ledger-pool")]
async fn post(amount: u64) -> Result<u64, E> {
    Ok(amount)
}

struct Client;

impl Client {
    #[resilient(breaker = "search", retries = 1, idempotent)]
    async fn find<T: Clone + Send>(&self, query: T) -> Result<T, E> {
        Ok(query)
    }
}

mod nested {
    #[resilient::resilient(bulkhead = "reports")]
    pub(crate) async fn report() -> Result<(), super::E> {
        Ok(())
    }
}

fn main() {
    let _ = (post(1), Client.find(2), nested::report());
    let err = Registry::builder().strict(true).build().unwrap().check_names().unwrap_err();
    let text = err.to_string();
    for name in ["ledger`", "ledger-retries", "ledger-pool", "search", "reports", "::nested::report"] {
        assert!(text.contains(name), "{name}: {text}");
    }
}
