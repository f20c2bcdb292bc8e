// `self: Box<Self>` is `self` by value behind a box: consumed by the first
// attempt, refused like `self`.

use resilient::resilient;

#[derive(Clone)]
struct Request;

impl Request {
    #[resilient(retries = 2, idempotent)]
    async fn send(self: Box<Self>) -> Result<(), std::io::Error> {
        Ok(())
    }
}

fn main() {}
