// `self` by value is consumed by the first attempt.

use resilient::resilient;

#[derive(Clone)]
struct Request {
    id: u32,
}

impl Request {
    #[resilient(retries = 2, idempotent)]
    async fn send(self) -> Result<u32, std::io::Error> {
        Ok(self.id)
    }
}

fn main() {}
