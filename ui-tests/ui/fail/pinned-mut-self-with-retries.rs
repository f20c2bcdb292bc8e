// `self: Pin<&mut Self>` is a mutable borrow: refused like `&mut self`.

use std::pin::Pin;

use resilient::resilient;

struct Client;

impl Client {
    #[resilient(retries = 2, idempotent)]
    async fn fetch(self: Pin<&mut Self>) -> Result<(), std::io::Error> {
        Ok(())
    }
}

fn main() {}
