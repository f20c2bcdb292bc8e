// A misused attribute still emits the function: its callers compile, and the
// only error is the attribute's.

use resilient::resilient;

#[resilient(retries = 99, idempotent)]
async fn fetch(id: u32) -> Result<u32, std::io::Error> {
    Ok(id)
}

struct Client;

impl Client {
    #[resilient(nonsense)]
    async fn get(&self) -> Result<u32, std::io::Error> {
        Ok(1)
    }
}

async fn caller() -> Result<u32, std::io::Error> {
    Ok(fetch(1).await? + Client.get().await?)
}

fn main() {
    let _ = caller();
}
