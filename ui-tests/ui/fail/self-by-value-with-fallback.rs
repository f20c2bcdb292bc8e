// `self` by value with a fallback: the call consumes it, and the fallback
// would get it after. The message says so (not "every attempt": without
// `retries` there is one).

use resilient::resilient;

#[derive(Clone)]
struct Request {
    id: u32,
}

impl Request {
    #[resilient(deadline_ms = 1000, fallback = Self::cached)]
    async fn send(self) -> Result<u32, std::io::Error> {
        Ok(self.id)
    }

    async fn cached(self, _error: std::io::Error) -> Result<u32, std::io::Error> {
        Ok(self.id)
    }
}

fn main() {}
