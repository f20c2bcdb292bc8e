// `&mut self` cannot be lent to every attempt.

use resilient::resilient;

struct Counter {
    n: u32,
}

impl Counter {
    #[resilient(retries = 2, idempotent)]
    async fn bump(&mut self) -> Result<u32, std::io::Error> {
        self.n += 1;
        Ok(self.n)
    }
}

fn main() {}
