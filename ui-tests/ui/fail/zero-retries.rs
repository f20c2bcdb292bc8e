// `retries = 0` retries nothing: a reader would take the function for one
// that is retried.

use resilient::resilient;

#[resilient(retries = 0, deadline_ms = 500)]
async fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
