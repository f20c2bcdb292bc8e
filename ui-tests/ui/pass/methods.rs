// Methods taking `&self`, in an inherent impl and in a native `async fn`
// trait impl; an associated function without a receiver.

use resilient::resilient;

struct Client {
    base: u32,
}

impl Client {
    #[resilient(retries = 2, idempotent)]
    async fn get(&self, n: u32) -> Result<u32, std::io::Error> {
        Ok(self.base + n)
    }

    #[resilient(deadline_ms = 100)]
    async fn new_checked(base: u32) -> Result<Self, std::io::Error> {
        Ok(Client { base })
    }
}

trait Store {
    async fn load(&self, id: u32) -> Result<u32, std::io::Error>;
}

impl Store for Client {
    #[resilient(retries = 2, idempotent, timeout_ms = 100)]
    async fn load(&self, id: u32) -> Result<u32, std::io::Error> {
        Ok(self.base * id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = Client::new_checked(10).await.unwrap();
    assert_eq!(client.get(1).await.unwrap(), 11);
    assert_eq!(client.load(2).await.unwrap(), 20);
}
