// `#[resilient]` wraps a future: it needs an `async fn`.

use resilient::resilient;

#[resilient(deadline_ms = 100)]
fn load() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
