// A boxed error under `retries` needs a `classify` function too; the notes
// must suggest a signature that is valid Rust (`fn(&Box<dyn …>)`), not
// `fn(&dyn Error + Send + Sync)`.

use resilient::resilient;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[resilient(retries = 2, idempotent)]
async fn fetch(id: u32) -> Result<u32, BoxError> {
    if id == 0 {
        return Err("not found".into());
    }
    Ok(id)
}

fn main() {}
