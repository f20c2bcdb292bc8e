// `#[resilient]` on something that is not a function.

use resilient::resilient;

#[resilient(retries = 3, idempotent)]
struct Client {
    base: String,
}

fn main() {}
