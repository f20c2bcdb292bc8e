// `#[async_trait]` rewrites the method into one returning a boxed future
// before `#[resilient]` sees it.

use async_trait::async_trait;
use resilient::resilient;

#[async_trait]
trait Store {
    async fn load(&self, id: u32) -> Result<u32, std::io::Error>;
}

struct Db;

#[async_trait]
impl Store for Db {
    #[resilient(retries = 2, idempotent)]
    async fn load(&self, id: u32) -> Result<u32, std::io::Error> {
        Ok(id)
    }
}

fn main() {}
