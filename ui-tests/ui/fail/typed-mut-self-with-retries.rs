// `self: &mut Self` is `&mut self` written out: refused the same way.

use resilient::resilient;

struct Client;

impl Client {
    #[resilient(retries = 2, idempotent)]
    async fn fetch(self: &mut Self) -> Result<(), std::io::Error> {
        Ok(())
    }
}

fn main() {}
