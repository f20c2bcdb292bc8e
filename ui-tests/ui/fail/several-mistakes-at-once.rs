// Independent mistakes are all reported at once.

use resilient::resilient;

#[resilient(retries = 20, deadline_ms = 0, timeout_ms = 0, base_ms = 500, cap_ms = 10, breaker = "db")]
fn fetch() {}

fn main() {}
