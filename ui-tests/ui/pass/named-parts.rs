// `breaker`, `budget`, `bulkhead` and `fallback` in their accepted forms.

use resilient::resilient;

#[resilient(breaker = "payments")]
async fn capture(id: u32) -> Result<u32, std::io::Error> {
    Ok(id)
}

#[resilient(breaker = "payments", budget = "payments-retries", bulkhead = "db", retries = 2, idempotent)]
async fn refund(id: u32) -> Result<u32, std::io::Error> {
    Ok(id)
}

async fn cached_price(id: u32, _error: std::io::Error) -> Result<u32, std::io::Error> {
    Ok(id)
}

#[resilient(bulkhead = "db", fallback = cached_price)]
async fn price(id: u32) -> Result<u32, std::io::Error> {
    Ok(id)
}

struct Quotes;

impl Quotes {
    #[resilient(breaker = "quotes", retries = 1, idempotent, fallback = Self::stale)]
    async fn get(&self, id: u32) -> Result<u32, std::io::Error> {
        Ok(id)
    }

    async fn stale(&self, id: u32, _error: std::io::Error) -> Result<u32, std::io::Error> {
        Ok(id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(capture(1).await.unwrap(), 1);
    assert_eq!(refund(2).await.unwrap(), 2);
    assert_eq!(price(3).await.unwrap(), 3);
    assert_eq!(Quotes.get(4).await.unwrap(), 4);
}
