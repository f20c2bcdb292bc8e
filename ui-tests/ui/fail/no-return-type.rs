// Without a return type there is no failure to retry or to report a refusal as.

use resilient::resilient;

#[resilient(deadline_ms = 100)]
async fn notify() {}

fn main() {}
