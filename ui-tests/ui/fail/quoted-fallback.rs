// `fallback` takes a path, not a string as `breaker` does.

use resilient::resilient;

async fn cached() -> Result<u32, std::io::Error> {
    Ok(0)
}

#[resilient(deadline_ms = 500, fallback = "cached")]
async fn fetch() -> Result<u32, std::io::Error> {
    Ok(1)
}

fn main() {}
