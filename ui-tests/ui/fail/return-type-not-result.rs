// A return type that is not a `Result`.

use resilient::resilient;

#[resilient(deadline_ms = 100)]
async fn count() -> u32 {
    1
}

fn main() {}
